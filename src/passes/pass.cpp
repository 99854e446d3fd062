#include "coil/passes/pass.h"

#include <algorithm>
#include <mutex>

#include "coil/graph/verifier.h"
#include "coil/passes/cse.h"
#include "coil/passes/dce.h"
#include "coil/support/error.h"

namespace coil::passes {

void PassRegistry::add(std::string name, std::string description, Factory make) {
  COIL_CHECK(!name.empty() && name.find_first_of(", \t\n") == std::string::npos)
      << "bad pass name '" << name << "'";
  COIL_CHECK(!contains(name)) << "pass '" << name << "' registered twice";
  COIL_CHECK(make != nullptr) << "pass '" << name << "' has no factory";
  entries_.push_back({std::move(name), std::move(description), std::move(make)});
}

std::unique_ptr<Pass> PassRegistry::create(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.name != name) continue;
    std::unique_ptr<Pass> p = e.make();
    COIL_CHECK(p != nullptr && p->name() == name)
        << "the factory of pass '" << name << "' made '" << (p ? p->name() : "nothing") << "'";
    return p;
  }
  return nullptr;
}

bool PassRegistry::contains(std::string_view name) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const Entry& e) { return e.name == name; });
}

PassRegistry builtin_passes() {
  PassRegistry r;
  r.add("dce", "remove nodes whose outputs nothing reads (side effects stay)", make_dce_pass);
  r.add("cse", "merge identical nodes (same op, inputs, arguments; never random ops)",
        make_cse_pass);
  return r;
}

namespace {
// Plugin passes, in registration order (register_passes). Appended to, never changed: each
// registered_passes() copies them (passes are created per pipeline, so a copy is cheap).
std::mutex& plugin_mutex() {
  static std::mutex m;
  return m;
}
std::vector<PassRegistry::Entry>& plugin_entries() {
  static std::vector<PassRegistry::Entry> entries;
  return entries;
}
}  // namespace

void register_passes(std::vector<PassRegistry::Entry> entries) {
  std::lock_guard<std::mutex> lock(plugin_mutex());
  PassRegistry known = builtin_passes();
  for (const PassRegistry::Entry& e : plugin_entries()) known.add(e.name, e.description, e.make);
  for (const PassRegistry::Entry& e : entries) {
    COIL_USER_CHECK(!e.name.empty() && e.name.find_first_of(", \t\n") == std::string::npos)
        << "bad pass name '" << e.name << "'";
    COIL_USER_CHECK(e.make != nullptr) << "pass '" << e.name << "' has no factory";
    COIL_USER_CHECK(!known.contains(e.name)) << "pass '" << e.name << "' is already registered";
    known.add(e.name, e.description, e.make);  // catches a name repeated within `entries`
  }
  for (PassRegistry::Entry& e : entries) plugin_entries().push_back(std::move(e));
}

PassRegistry registered_passes() {
  PassRegistry r = builtin_passes();
  std::lock_guard<std::mutex> lock(plugin_mutex());
  for (const PassRegistry::Entry& e : plugin_entries()) r.add(e.name, e.description, e.make);
  return r;
}

Pipeline Pipeline::parse(std::string_view list, const PassRegistry& registry) {
  Pipeline p;
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  while (true) {
    size_t comma = list.find(',');
    std::string_view name = trim(list.substr(0, comma));
    if (!name.empty()) {
      std::unique_ptr<Pass> pass = registry.create(name);
      if (pass == nullptr) {
        std::string known;
        for (const auto& e : registry.entries()) known += (known.empty() ? "" : ", ") + e.name;
        COIL_UNSUPPORTED() << "unknown pass '" << name << "' (known: " << known << ")";
      }
      p.add(std::move(pass));
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return p;
}

void Pipeline::add(std::unique_ptr<Pass> pass) {
  COIL_CHECK(pass != nullptr) << "null pass";
  passes_.push_back(std::move(pass));
}

std::vector<std::string> Pipeline::run(Graph& g, const CompileOptions& options,
                                       const PipelineOptions& po) const {
  std::vector<std::string> changed;
  if (po.verify_each && !passes_.empty()) verify_graph(g);  // the input: CompileError as is
  for (const auto& p : passes_) {
    Pass& pass = *p;
    const bool did = pass.run(g, options);
    if (po.verify_each) {
      try {
        verify_graph(g);
      } catch (const CompileError& e) {
        // A pass that breaks the graph is a bug in the pass.
        COIL_INTERNAL_ERROR() << "after pass '" << pass.name() << "': " << e.what();
      }
    }
    if (did) changed.emplace_back(pass.name());
    if (po.after_pass) po.after_pass(pass, did, g);
  }
  return changed;
}

Pipeline build_pipeline(const CompileOptions& options) {
  return Pipeline::parse(options.passes, registered_passes());
}

NodeOrigins::NodeOrigins(const Graph& g) {
  for (size_t i = 0; i < g.nodes().size(); ++i)
    position_.emplace(g.nodes()[i], static_cast<int>(i));
}

std::vector<int> NodeOrigins::positions(const Graph& g) const {
  std::vector<int> out;
  out.reserve(g.nodes().size());
  for (const Node* n : g.nodes()) {
    auto it = position_.find(n);
    out.push_back(it == position_.end() ? -1 : it->second);
  }
  return out;
}

}  // namespace coil::passes
