// Shared by the loader's two files (src/plugin only).
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "coil/plugin/loader.h"

namespace coil::plugin::detail {

// Serializes loads and registrations: the registries change only under it.
std::mutex& load_mutex();
// Runs `entry` with a fresh Registrar and commits it (register.cpp). Caller holds load_mutex.
LoadedPlugin run_entry(const std::string& name, coil_plugin_register_fn entry);
// Checks every name of `reg`, then adds them all. Caller holds load_mutex.
LoadedPlugin commit(const std::string& name, const Registrar& reg);

// The backends of `reg` (register_backend.cpp): their names, checked (PluginError naming
// plugin `name` when one is null, badly named, taken, or repeats); then their commit to the
// runtime's backend table. commit() calls both. Caller holds load_mutex.
std::vector<std::string> check_backends(const std::string& name, const Registrar& reg);
void commit_backends(const Registrar& reg);

}  // namespace coil::plugin::detail
