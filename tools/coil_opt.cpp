// coil-opt: parse a text graph, verify it, run passes, print the result — or, with
// --emit=cuda / --emit=cpp, the kernels the backend generates for it (lowered and scheduled as
// compile_graph does, prelude left out), so a kernel can be read without a GPU; --emit=fusion,
// the scheduler's fusion log (every fusion taken or refused, with the reason) and schedule.
//
//   coil-opt FILE [--passes=dce[,other...]] [--no-verify] [--emit=cuda|cpp|fusion]
//
// FILE "-" reads stdin. Exit status 1 on a CompileError (message on stderr), 2 on bad usage.
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "coil/backend/cpu/emit_cpp.h"
#include "coil/backend/cuda/emit_cuda.h"
#include "coil/graph/graph.h"
#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/lower/lower.h"
#include "coil/ops/verify.h"
#include "coil/sched/align.h"
#include "coil/sched/schedule.h"
#include "coil/support/error.h"

namespace {

struct Pass {
  std::string_view name;
  std::string_view help;
  void (*run)(coil::Graph& g);
};

constexpr Pass kPasses[] = {
    {"dce", "remove nodes whose outputs are unused", [](coil::Graph& g) { g.remove_dead_nodes(); }},
};

const Pass* find_pass(std::string_view name) {
  for (const Pass& p : kPasses) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

int usage(const char* msg) {
  if (msg) std::cerr << "coil-opt: " << msg << "\n";
  std::cerr << "usage: coil-opt FILE [--passes=NAME[,NAME...]] [--no-verify] "
               "[--emit=cuda|cpp|fusion]\n"
               "passes:\n";
  for (const Pass& p : kPasses) std::cerr << "  " << p.name << "  " << p.help << "\n";
  return 2;
}

// The generated source of the graph's kernels, without the prelude.
std::string emit(const coil::Graph& g, std::string_view backend) {
  coil::CompileOptions o;
  auto lowered = coil::lower::lower_graph(g, o);
  coil::sched::align_iteration_spaces(lowered.program);
  coil::sched::Schedule s = coil::sched::schedule_program(lowered.program, o);
  if (backend == "fusion")
    return s.fusion_log + "\n" + coil::sched::print_schedule(lowered.program, s);
  if (backend == "cuda")
    return coil::backend::cuda::strip_prelude(
        coil::backend::cuda::emit_cuda(lowered.program, s, o).code);
  return coil::backend::cpu::emit_cpp(lowered.program, s, o).code;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file;
  std::vector<const Pass*> passes;
  bool verify = true;
  std::string_view emit_backend;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.starts_with("--passes=")) {
      std::string_view list = a.substr(9);
      while (!list.empty()) {
        size_t comma = list.find(',');
        std::string_view name = list.substr(0, comma);
        if (!name.empty()) {
          const Pass* p = find_pass(name);
          if (!p) return usage(("unknown pass '" + std::string(name) + "'").c_str());
          passes.push_back(p);
        }
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
      }
    } else if (a.starts_with("--emit=")) {
      emit_backend = a.substr(7);
      if (emit_backend != "cuda" && emit_backend != "cpp" && emit_backend != "fusion")
        return usage("--emit takes cuda, cpp or fusion");
    } else if (a == "--no-verify") {
      verify = false;
    } else if (a == "-h" || a == "--help") {
      return usage(nullptr);
    } else if (file.empty() && (a == "-" || !a.starts_with("-"))) {
      file = a;
    } else {
      return usage(("unexpected argument '" + std::string(a) + "'").c_str());
    }
  }
  if (file.empty()) return usage("no input file");
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
    for (const Pass* p : passes) {
      p->run(*g);
      if (verify) coil::ops::verify_graph_meta(*g);
    }
    std::cout << (emit_backend.empty() ? coil::print_graph(*g) : emit(*g, emit_backend));
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
