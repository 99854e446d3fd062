// Committing a plugin's registrations (the second half of load_plugin): run its entry point
// with a fresh Registrar, check every name against the registries, then add them.
#include <algorithm>
#include <exception>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "coil/lower/lowering.h"
#include "coil/ops/registry.h"
#include "coil/passes/pass.h"
#include "coil/plugin/loader.h"
#include "plugin_internal.h"

namespace coil::plugin {

namespace {

// The first name of `names` that is taken or repeats, else "".
template <typename Taken>
std::string first_clash(const std::vector<std::string>& names, Taken taken) {
  std::set<std::string> seen;
  for (const std::string& n : names) {
    if (taken(n) || !seen.insert(n).second) return n;
  }
  return "";
}

}  // namespace

std::mutex& detail::load_mutex() {
  static std::mutex m;
  return m;
}

LoadedPlugin detail::commit(const std::string& name, const Registrar& reg) {
  LoadedPlugin out;
  out.name = name;
  for (const auto& d : reg.ops()) out.ops.push_back(d.name);
  for (const auto& l : reg.lowerings()) out.lowerings.push_back(l.op);
  for (const auto& p : reg.passes()) out.passes.push_back(p.name);

  // Every name is checked before anything is added, so that a plugin with one taken name
  // leaves no trace. Loads are serialized (load_mutex), and the registries are changed only
  // by loads, so nothing can take a name between the check and the add.
  const std::string op =
      first_clash(out.ops, [](const std::string& n) { return ops::find_op(n) != nullptr; });
  if (!op.empty())
    throw PluginError("plugin '" + name + "': op " + op +
                      " is already registered (by coil, an earlier plugin, or twice here)");
  const std::string low = first_clash(out.lowerings, [](const std::string& n) {
    return lower::lowering_registry().find(n) != nullptr;
  });
  if (!low.empty())
    throw PluginError("plugin '" + name + "': op " + low +
                      " already has a lowering (from coil, an earlier plugin, or twice here)");
  const passes::PassRegistry known = passes::registered_passes();
  const std::string pass =
      first_clash(out.passes, [&](const std::string& n) { return known.contains(n); });
  if (!pass.empty())
    throw PluginError("plugin '" + name + "': pass '" + pass +
                      "' is already registered (by coil, an earlier plugin, or twice here)");
  out.backends = check_backends(name, reg);  // register_backend.cpp

  for (const auto& d : reg.ops()) {
    if (d.meta == nullptr)
      throw PluginError("plugin '" + name + "': op " + d.name + " has no meta function");
    if (!d.schema_text.empty() && !ops::parse_schema(d.schema_text))
      throw PluginError("plugin '" + name + "': op " + d.name + ": cannot parse its schema '" +
                        d.schema_text + "'");
  }
  for (const auto& l : reg.lowerings()) {
    if (l.fn == nullptr)
      throw PluginError("plugin '" + name + "': the lowering of " + l.op + " is empty");
    // The op table's rule: an op coil lowers has a meta function (this plugin's or coil's).
    const bool own = std::any_of(reg.ops().begin(), reg.ops().end(),
                                 [&](const auto& d) { return d.name == l.op; });
    if (!own && ops::find_op(l.op) == nullptr)
      throw PluginError("plugin '" + name + "': op " + l.op +
                        " gets a lowering but has no meta function (add_op it first)");
  }
  for (const auto& p : reg.passes()) {
    if (p.name.empty() || p.name.find_first_of(", \t\n") != std::string::npos)
      throw PluginError("plugin '" + name + "': bad pass name '" + p.name +
                        "' (no commas or blanks)");
    if (p.make == nullptr)
      throw PluginError("plugin '" + name + "': pass '" + p.name + "' has no factory");
  }

  // Checked, so none of these throws; each still checks (against registrations made outside
  // a load: a program's own calls), and would fail loudly rather than half-commit silently.
  std::vector<std::pair<std::string, lower::LoweringFn>> fns;
  for (const auto& l : reg.lowerings()) fns.emplace_back(l.op, l.fn);
  try {
    commit_backends(reg);
    passes::register_passes(reg.passes());
    ops::register_ops(reg.ops());
    lower::register_lowerings(std::move(fns));
  } catch (const std::exception& e) {
    throw PluginError("plugin '" + name + "': " + e.what());
  }
  return out;
}

LoadedPlugin detail::run_entry(const std::string& name, coil_plugin_register_fn entry) {
  Registrar reg;
  try {
    entry(reg);
  } catch (const std::exception& e) {
    throw PluginError("plugin '" + name + "': coil_plugin_register threw: " + e.what());
  } catch (...) {
    throw PluginError("plugin '" + name + "': coil_plugin_register threw a non-std exception");
  }
  return commit(name, reg);
}

LoadedPlugin register_plugin(const std::string& name, coil_plugin_register_fn entry) {
  std::lock_guard<std::mutex> lock(detail::load_mutex());
  return detail::run_entry(name, entry);
}

}  // namespace coil::plugin
