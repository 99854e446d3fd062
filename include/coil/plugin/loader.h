// The host side of plugins: loading a plugin library and committing what it registers to
// coil's process-wide op, lowering, pass and backend registries (coil/plugin/plugin.h is the plugin
// side). coil.load_plugin (python/coil/plugin.py) calls load_plugin through the extension.
//
// Thread-safe: loads are serialized by one mutex; compiles running meanwhile keep reading the
// registries without a lock (each registry publishes a new table; see register_ops in
// coil/ops/registry.h), and see a plugin's additions all at once or not at all.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "coil/plugin/plugin.h"
#include "coil/support/error.h"

namespace coil::plugin {

// A plugin could not be loaded: the file is missing or is not a shared library, a symbol is
// missing, it was built against another coil, its entry point threw, or a name it registers
// is already taken. The message names the plugin and says which. Nothing of a plugin that
// failed is registered.
class PluginError : public CompileError {
 public:
  using CompileError::CompileError;
};

struct LoadedPlugin {
  std::string path;  // canonical (symlinks resolved): a second load of it is a no-op
  std::string name;  // AbiInfo::plugin_name
  std::vector<std::string> ops, lowerings, passes;  // what it registered
  std::vector<std::string> backends;                // its backends' names
};

// Loads the plugin at `path` (dlopen, ABI check, coil_plugin_register, commit) and returns
// what it registered; a path loaded before returns the earlier record without loading again.
// PluginError on any failure.
LoadedPlugin load_plugin(const std::string& path);

// Plugins loaded so far, in load order.
std::vector<LoadedPlugin> loaded_plugins();

// The checks load_plugin makes on a plugin's coil_plugin_abi() (PluginError naming `where` when
// it differs from this coil's). Exposed for tests.
void check_abi(const AbiInfo& info, const std::string& where);

// Runs `entry` with a fresh Registrar and commits what it added, all or nothing (PluginError
// naming `name` on a taken name or when `entry` throws). load_plugin's second half, also for
// plugins linked into a program statically (and tests); records nothing in loaded_plugins().
LoadedPlugin register_plugin(const std::string& name, coil_plugin_register_fn entry);

}  // namespace coil::plugin
