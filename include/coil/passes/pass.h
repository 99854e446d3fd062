// Graph-to-graph passes: the layer between the graph IR (parse, verify, print) and lowering.
//
// A Pass rewrites a Graph in place and says whether it changed it. Passes are registered by
// name in a PassRegistry (a value: builtin_passes() makes one with coil's passes; a tool or a
// test may add its own), and a Pipeline is an ordered list of passes built from a comma list
// ("dce,cse"), normally CompileOptions::passes. Nothing here reads the environment, and the
// only global is the list of passes plugins added (register_passes): a pass gets the typed
// CompileOptions of the compilation and nothing else.
//
// After each pass the pipeline can run the graph verifier (coil/graph/verifier.h):
// PipelineOptions::verify_each, on by default in debug builds, and set by the tests. A graph
// that fails verification after a pass is a bug in that pass: InternalError naming it.
//
//   PassRegistry registry = builtin_passes();
//   Pipeline pipeline = Pipeline::parse(options.passes, registry);   // CompileError if unknown
//   PipelineOptions po;
//   po.after_pass = [](const Pass& p, bool changed, const Graph& g) { ... };
//   pipeline.run(graph, options, po);
//
// docs/extending/write-a-pass.md walks through writing and registering a pass.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "coil/graph/graph.h"
#include "coil/support/options.h"

namespace coil::passes {

class Pass {
 public:
  virtual ~Pass() = default;
  // The name it is registered and listed under ("cse"): lower-case, no commas or spaces.
  virtual std::string_view name() const = 0;
  // Rewrites `g` in place. Returns true iff the graph changed (its printout differs). A pass
  // keeps the graph valid (verify_graph) and every graph output's meta as it was.
  virtual bool run(Graph& g, const CompileOptions& options) = 0;
};

class PassRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Pass>()>;
  struct Entry {
    std::string name;
    std::string description;  // one line, for coil-opt --help
    Factory make;
  };

  // InternalError for an empty or malformed name, or one already registered.
  void add(std::string name, std::string description, Factory make);
  // A new instance of the pass, or nullptr when no pass has that name.
  std::unique_ptr<Pass> create(std::string_view name) const;
  bool contains(std::string_view name) const;
  // In registration order.
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

// coil's own passes: dce (dce.h), cse (cse.h).
PassRegistry builtin_passes();

// Passes that plugins add (coil/plugin/loader.h). The one piece of global state of this layer,
// so that a plugin loaded once is seen by every later compile: register_passes appends under a
// mutex, all or nothing (CompileError naming a pass that a built-in or an earlier registration
// already has, or that repeats); registered_passes() is builtin_passes() plus those, a copy.
void register_passes(std::vector<PassRegistry::Entry> entries);
PassRegistry registered_passes();

struct PipelineOptions {
#ifdef NDEBUG
  static constexpr bool kVerifyByDefault = false;
#else
  static constexpr bool kVerifyByDefault = true;
#endif
  // verify_graph before the first pass (a bad input: its CompileError) and after every pass
  // (InternalError naming the pass).
  bool verify_each = kVerifyByDefault;
  // Called after every pass, changed or not (coil-opt prints, the debug dump records, tools
  // add their own checks; an exception thrown here propagates).
  std::function<void(const Pass& pass, bool changed, const Graph& g)> after_pass;
};

class Pipeline {
 public:
  Pipeline() = default;
  // Passes named in `list`, comma-separated, in order; blanks around names and empty items are
  // ignored ("" is the empty pipeline) and a name may repeat ("dce,cse,dce"). CompileError for
  // an unknown name (the message lists the known ones).
  static Pipeline parse(std::string_view list, const PassRegistry& registry);

  void add(std::unique_ptr<Pass> pass);
  const std::vector<std::unique_ptr<Pass>>& passes() const { return passes_; }
  bool empty() const { return passes_.empty(); }

  // Runs the passes in order; returns the names of those that changed the graph, in order.
  std::vector<std::string> run(Graph& g, const CompileOptions& options,
                               const PipelineOptions& po = {}) const;

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

// The pipeline that compile_graph runs: Pipeline::parse(options.passes, registered_passes()).
Pipeline build_pipeline(const CompileOptions& options);

// Node positions across passes. The front end names a node by its position in the graph it
// exported (the per-op fallback, python/coil/node_fallback.py, and loop::ExternNode::graph_node
// carry it); once a pass removed or added nodes, a node's position in Graph::nodes() is no
// longer that. Record the positions before the passes and ask for them after.
class NodeOrigins {
 public:
  explicit NodeOrigins(const Graph& g);
  // For every node of `g` now (in Graph::nodes() order): its position when recorded, or -1 for
  // a node added since.
  std::vector<int> positions(const Graph& g) const;

 private:
  std::unordered_map<const Node*, int> position_;
};

}  // namespace coil::passes
