// compile_graph: the whole pipeline, timed per stage.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>
#include <unordered_map>

#include "coil/backend/api/backend.h"
#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/loop/printer.h"
#include "coil/lower/lower.h"
#include "coil/ops/verify.h"
#include "coil/passes/pass.h"
#include "coil/runtime/backends.h"
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
// Without inputs: the device of the first value that names a device other than the CPU.
Device graph_device(const Graph& graph) {
  std::optional<Device> dev;
  for (const Value* v : graph.inputs()) {
    Device d = v->meta().device;
    COIL_USER_CHECK(!dev || *dev == d) << "inputs on several devices (cpu and cuda)";
    dev = d;
  }
  if (dev) return *dev;
  for (const Node* n : graph.nodes())
    for (const Value* v : n->outputs())
      if (v->meta().device != Device::CPU) return v->meta().device;
  return Device::CPU;
}

// The graph passes (src/passes, options.passes). Returns, for each node left, its position in
// the graph as parsed (-1: added by a pass), the numbering the front end's per-op fallback uses.
// Each pass is a compile stage of its own in a.timings ("pass:cse"); with a debug dir, `dumps`
// gets 01b_<k>_after_<pass>.txt and a.pass_graphs the text for the k-th pass if it changed it.
std::vector<int> run_graph_passes(Graph& graph, const CompileOptions& options, PassDumps& dumps,
                                  CompileArtifacts& a) {
  passes::NodeOrigins origins(graph);
  passes::PipelineOptions po;
  int k = 0;
  auto t0 = std::chrono::steady_clock::now();
  po.after_pass = [&](const passes::Pass& p, bool changed, const Graph& g) {
    ++k;
    const auto now = std::chrono::steady_clock::now();
    a.timings.emplace_back("pass:" + std::string(p.name()),
                           std::chrono::duration<double>(now - t0).count());
    if (changed && !options.debug_dir.empty()) {
      std::string text = print_graph(g);
      a.pass_graphs.emplace_back(std::string(p.name()), text);
      dumps.emplace_back("01b_" + std::to_string(k) + "_after_" + std::string(p.name()) + ".txt",
                         std::move(text));
    }
    t0 = std::chrono::steady_clock::now();  // the dump's printing is not the pass's time
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
  const std::vector<int> origin = run_graph_passes(*graph, options, pass_dumps, a);
  // The backend that generates the code owns every device choice from here on: lowering
  // and scheduling read its policy, it emits and compiles the kernels, and its module says
  // which of the runtime's step runners runs them.
  const backend::Backend& target = backends().select(graph_device(*graph), options.backend_target);
  const backend::TargetPolicy& policy = target.policy();
  lower::LowerResult lowered =
      time("lower", [&] { return lower::lower_graph(*graph, options, policy); });
  a.fallback_ops = lowered.fallback_ops;
  loop::LoopProgram& program = lowered.program;
  for (loop::Step& step : program.steps) {  // node positions as the front end numbered them
    auto* e = std::get_if<loop::ExternNode>(&step);
    if (e && e->graph_node >= 0) e->graph_node = origin.at(e->graph_node);
  }
  a.loop_program = loop::print_program(program);
  std::string align_log;
  sched::Schedule schedule = time("schedule", [&] {
    if (options.fuse) align_log = sched::align_iteration_spaces(program, policy.schedule, options);
    return sched::schedule_program(program, options, policy);
  });
  a.schedule = sched::print_schedule(program, schedule);
  a.fusion_log = align_log + schedule.fusion_log;
  a.num_kernels = static_cast<int>(schedule.kernels.size());
  std::optional<backend::GeneratedCode> code;
  if (!schedule.kernels.empty()) {
    code = time("emit", [&] { return target.generate(program, schedule, options); });
    a.source = code->text;
  }
  backend::KernelModule module = target.build(code ? &*code : nullptr, program, schedule, options);
  a.timings.insert(a.timings.end(), module.timings.begin(), module.timings.end());
  a.compiler_command = module.compiler_command;
  a.compiler_log = module.compiler_log;
  a.cache_hit = module.cache_hit;
  a.warnings.insert(a.warnings.end(), module.warnings.begin(), module.warnings.end());
  auto prog = time("program", [&] {
    switch (module.steps) {
      case backend::RuntimeSteps::Cuda: {
        COIL_CHECK(module.device_kernels != nullptr)
            << "backend " << target.name() << ": CUDA steps without compiled kernels";
        return std::make_unique<Program>(
            program, schedule, *std::static_pointer_cast<CudaKernels>(module.device_kernels),
            options, std::move(fallback));
      }
      case backend::RuntimeSteps::Host:
        break;
    }
    COIL_CHECK(module.host_entries.size() == schedule.kernels.size())
        << "backend " << target.name() << " returned " << module.host_entries.size()
        << " entry points for " << schedule.kernels.size() << " kernels";
    std::vector<KernelFn> kernels;
    for (void* fn : module.host_entries) kernels.push_back(reinterpret_cast<KernelFn>(fn));
    return std::make_unique<Program>(program, schedule, std::move(kernels),
                                     std::move(module.library), options, std::move(fallback));
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
