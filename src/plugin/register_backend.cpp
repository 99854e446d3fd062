// A plugin's backends (Registrar::add_backend): checked with the rest of the plugin before
// anything is added, then published to the runtime's backend table (coil/runtime/backends.h),
// where option backend_target selects them by name.
#include <set>
#include <string>
#include <vector>

#include "coil/plugin/loader.h"
#include "coil/runtime/backends.h"
#include "plugin_internal.h"

namespace coil::plugin {

std::vector<std::string> detail::check_backends(const std::string& name, const Registrar& reg) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  const backend::BackendRegistry& known = runtime::backends();
  for (const auto& b : reg.backends()) {
    if (b == nullptr) throw PluginError("plugin '" + name + "': add_backend got a null backend");
    const std::string n(b->name());
    if (n.empty() || n.find_first_of(", \t\n") != std::string::npos)
      throw PluginError("plugin '" + name + "': bad backend name '" + n +
                        "' (no commas or blanks)");
    if (known.find(n) != nullptr || !seen.insert(n).second)
      throw PluginError("plugin '" + name + "': backend '" + n +
                        "' is already registered (by coil, an earlier plugin, or twice here)");
    names.push_back(n);
  }
  return names;
}

void detail::commit_backends(const Registrar& reg) {
  if (!reg.backends().empty()) runtime::register_backends(reg.backends());
}

}  // namespace coil::plugin
