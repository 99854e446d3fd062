// coil-opt: parse a text graph, verify it, run graph passes (src/passes), print the result — or,
// with --emit=BACKEND (cuda, cpu or cpp, portable: a name of coil/runtime/backends.h), the
// kernels that backend generates for it (lowered and scheduled with its policy, as
// compile_graph does; prelude left out), so a kernel can be read without a GPU;
// --emit=fusion, the scheduler's fusion log (the nodes split or reordered to align, then every
// fusion taken or refused, with the reason)
// and schedule; --emit=loops, the loop program the device's backend lowers the graph to (the
// realize rule's outcome, before fusion).
//
//   coil-opt FILE [--plugin=PATH]... [--passes=NAME[,NAME...]] [--final] [--no-verify]
//            [--emit=cuda|cpp|portable|fusion|loops|BACKEND] [--compile] [--set=OPTION=VALUE]...
//
// --compile (with --emit=cuda) also compiles the generated source with NVRTC for sm_90, as the
// runtime would on an H100, without a GPU (libnvrtc alone: NVIDIA's nvidia-cuda-nvrtc wheel,
// which scripts/setup.sh installs; option cuda_nvrtc_path names another): a dumped graph's
// kernels are checked to compile on a machine with no GPU. Prints a summary line instead of the
// kernels; exits 1 with NVRTC's log where they do not compile, 77 where NVRTC does not load.
//
// --set sets a compile option (a field of coil/support/options.h, e.g.
// --set=recompute_cheap_values=0) for the lowering and scheduling that --emit runs.
// --plugin loads a coil plugin (coil/plugin/loader.h; repeatable, in order) before anything
// else, so that a graph dumped from a model that used a plugin's ops parses and verifies, and
// its passes and backends can be named, as in the process that dumped it.
// The passes run in the order given (any sequence, repeats allowed). The graph is printed after
// each pass that changed it, under a "# after <pass>" line (a comment: a single printout parses
// back), or as it was read when none did; --final prints only the graph at the end (and --emit
// only the kernels). Unless --no-verify, the graph's structure (verify_graph) and metas
// (verify_graph_meta) are checked before the first pass and after each one; a failure after a
// pass names it. FILE "-" reads stdin. Exit status 1 on a CompileError (message on stderr; a
// plugin that does not load is one), 2 on bad usage, 3 on an internal error (a pass that broke
// the graph).
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "coil/backend/api/backend.h"
#include "coil/backend/cuda/emit_cuda.h"
#include "coil/backend/cuda/nvrtc.h"
#include "coil/graph/graph.h"
#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/loop/printer.h"
#include "coil/lower/lower.h"
#include "coil/ops/verify.h"
#include "coil/passes/pass.h"
#include "coil/plugin/loader.h"
#include "coil/runtime/backends.h"
#include "coil/sched/align.h"
#include "coil/sched/schedule.h"
#include "coil/support/error.h"
#include "coil/support/options.h"

namespace {

int usage(const char* msg) {
  if (msg) std::cerr << "coil-opt: " << msg << "\n";
  std::cerr << "usage: coil-opt FILE [--plugin=PATH]... [--passes=NAME[,NAME...]] [--final] "
               "[--no-verify] [--emit=cuda|cpp|portable|fusion|loops|BACKEND] [--compile] "
               "[--set=OPTION=VALUE]...\n"
               "passes:\n";
  const coil::passes::PassRegistry registry = coil::passes::registered_passes();
  for (const auto& e : registry.entries())
    std::cerr << "  " << e.name << "  " << e.description << "\n";
  return 2;
}

// The generated source of the graph's kernels, without the prelude, as the backend of that
// name (cpp: cpu) lowers, schedules and emits it; fusion: the fusion log and schedule of the
// default backend of the graph's inputs' device.
// Sets option `name` (a CompileOptions field) from its text; false when there is no such
// field or the text is not a value of its type.
bool set_option(coil::CompileOptions& o, std::string_view name, const std::string& text) {
  auto parse = [&](auto& field) {
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<T, bool>) {
      if (text != "0" && text != "1" && text != "true" && text != "false") return false;
      field = text == "1" || text == "true";
    } else if constexpr (std::is_same_v<T, std::string>) {
      field = text;
    } else {
      size_t used = 0;
      try {
        field = static_cast<T>(std::stoll(text, &used));
      } catch (const std::exception&) {
        return false;
      }
      if (used != text.size()) return false;
    }
    return true;
  };
#define COIL_OPT_SET_FIELD(type, field, def, affects) \
  if (name == #field) return parse(o.field);
  COIL_OPTION_FIELDS(COIL_OPT_SET_FIELD)
#undef COIL_OPT_SET_FIELD
  return false;
}

// The graph lowered and scheduled for backend `b`, as compile_graph does.
struct Scheduled {
  coil::lower::LowerResult lowered;
  coil::sched::Schedule schedule;
  std::string align_log;  // the nodes align_iteration_spaces split or reordered
};
Scheduled schedule_for(const coil::Graph& g, const coil::backend::Backend& b,
                       const coil::CompileOptions& o) {
  Scheduled r{coil::lower::lower_graph(g, o, b.policy()), {}, {}};
  r.align_log = coil::sched::align_iteration_spaces(r.lowered.program, b.policy().schedule, o);
  r.schedule = coil::sched::schedule_program(r.lowered.program, o, b.policy());
  return r;
}

// --compile's exit status where NVRTC cannot be loaded (ctest's SKIP_RETURN_CODE).
constexpr int kNoNvrtc = 77;

// --compile: the CUDA backend's source of `g` through NVRTC for sm_90.
int compile_cuda(const coil::Graph& g, const coil::CompileOptions& o) {
  const std::string why = coil::backend::cuda::nvrtc_unavailable_reason(o);
  if (!why.empty()) {
    std::cerr << "coil-opt: --compile: " << why << "\n";
    return kNoNvrtc;
  }
  const coil::backend::Backend& b = *coil::runtime::backends().find("cuda");
  const Scheduled s = schedule_for(g, b, o);
  const coil::backend::cuda::CudaSource source =
      coil::backend::cuda::emit_cuda(s.lowered.program, s.schedule, o);
  coil::CompileOptions uncached = o;
  uncached.cache_dir.clear();  // a check, not a build: nothing is kept
  const coil::backend::cuda::CubinResult r =
      coil::backend::cuda::compile_to_cubin(source.code, 9, 0, uncached);
  std::cout << source.kernels.size() << " kernel(s) compiled for sm_90: " << r.cubin.size()
            << " bytes of cubin in " << r.seconds << " s (" << r.command << ")\n";
  return 0;
}

std::string emit(const coil::Graph& g, std::string_view backend, const coil::CompileOptions& o) {
  const coil::backend::BackendRegistry& backends = coil::runtime::backends();
  const coil::Device device =
      g.inputs().empty() ? coil::Device::CPU : g.inputs().front()->meta().device;
  const coil::backend::Backend& b = backend == "fusion" || backend == "loops"
                                        ? backends.select(device, "")
                                        : *backends.find(backend == "cpp" ? "cpu" : backend);
  if (backend == "loops")
    return coil::loop::print_program(coil::lower::lower_graph(g, o, b.policy()).program);
  const Scheduled s = schedule_for(g, b, o);
  if (backend == "fusion")
    return s.align_log + s.schedule.fusion_log + "\n" +
           coil::sched::print_schedule(s.lowered.program, s.schedule);
  return b.generate(s.lowered.program, s.schedule, o).text;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file;
  std::string pass_list;
  bool verify = true;
  bool final_only = false;
  std::string_view emit_backend;
  bool compile = false;
  std::vector<std::string> plugins;
  coil::CompileOptions options;
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.starts_with("--passes=")) {
      pass_list += "," + std::string(a.substr(9));  // several --passes= run one after another
    } else if (a.starts_with("--plugin=")) {
      plugins.emplace_back(a.substr(9));
    } else if (a.starts_with("--set=")) {
      const std::string_view kv = a.substr(6);
      const size_t eq = kv.find('=');
      if (eq == std::string_view::npos ||
          !set_option(options, kv.substr(0, eq), std::string(kv.substr(eq + 1))))
        return usage(
            ("--set takes OPTION=VALUE of a CompileOptions field, not '" + std::string(kv) + "'")
                .c_str());
    } else if (a.starts_with("--emit=")) {
      emit_backend = a.substr(7);
    } else if (a == "--compile") {
      compile = true;
    } else if (a == "--final") {
      final_only = true;
    } else if (a == "--no-verify") {
      verify = false;
    } else if (a == "-h" || a == "--help") {
      help = true;  // after the plugins are loaded: the usage lists their passes
    } else if (file.empty() && (a == "-" || !a.starts_with("-"))) {
      file = a;
    } else {
      return usage(("unexpected argument '" + std::string(a) + "'").c_str());
    }
  }
  // Plugins first: their passes and backends are names the options below may use, and their
  // ops are what the graph may contain.
  for (const std::string& path : plugins) {
    try {
      coil::plugin::load_plugin(path);
    } catch (const coil::plugin::PluginError& e) {
      std::cerr << "coil-opt: " << e.what() << "\n";
      return 1;
    }
  }
  if (help) return usage(nullptr);
  if (file.empty()) return usage("no input file");
  if (!emit_backend.empty() && emit_backend != "cpp" && emit_backend != "fusion" &&
      emit_backend != "loops" && !coil::runtime::backends().find(emit_backend)) {
    std::string names;
    for (const std::string& n : coil::runtime::backends().names())
      names += (names.empty() ? "" : ", ") + n;
    return usage(("--emit takes cpp, fusion, loops or a backend's name (" + names + ")").c_str());
  }
  if (compile && emit_backend != "cuda") return usage("--compile goes with --emit=cuda");
  coil::passes::Pipeline pipeline;
  try {
    pipeline = coil::passes::Pipeline::parse(pass_list, coil::passes::registered_passes());
  } catch (const coil::CompileError& e) {
    std::string_view msg = e.what();  // "src/passes/pass.cpp:N: unknown pass 'x' (known: ...)"
    size_t at = msg.find("unknown pass");
    return usage(std::string(at == std::string_view::npos ? msg : msg.substr(at)).c_str());
  }
  std::string text;
  if (file == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::cerr << "coil-opt: cannot open " << file << "\n";
      return 1;
    }
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  try {
    coil::sym::Context ctx;
    auto g = coil::parse_graph(text, ctx);
    if (verify) coil::ops::verify_graph_meta(*g);
    const bool print_each = emit_backend.empty() && !final_only;
    bool printed = false;
    coil::passes::PipelineOptions po;
    po.verify_each = verify;
    po.after_pass = [&](const coil::passes::Pass& p, bool changed, const coil::Graph& graph) {
      if (verify) {
        try {
          coil::ops::verify_graph_meta(graph);
        } catch (const coil::CompileError& e) {
          COIL_INTERNAL_ERROR() << "after pass '" << p.name() << "': " << e.what();
        }
      }
      if (print_each && changed) {
        std::cout << "# after " << p.name() << "\n" << coil::print_graph(graph);
        printed = true;
      }
    };
    pipeline.run(*g, coil::CompileOptions{}, po);
    if (compile) {
      return compile_cuda(*g, options);
    } else if (!emit_backend.empty()) {
      std::cout << emit(*g, emit_backend, options);
    } else if (!printed) {
      std::cout << coil::print_graph(*g);
    }
  } catch (const coil::CompileError& e) {
    // Parse errors start with "line:col: ", which reads well after "file:".
    std::string_view msg = e.what();
    bool located = !msg.empty() && msg[0] >= '0' && msg[0] <= '9';
    std::cerr << (file == "-" ? "<stdin>" : file) << (located ? ":" : ": ") << msg << "\n";
    return 1;
  } catch (const coil::InternalError& e) {
    std::cerr << "coil-opt: internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
