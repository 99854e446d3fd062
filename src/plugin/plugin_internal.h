// Shared by the loader's two files (src/plugin only).
#pragma once

#include <mutex>
#include <string>

#include "coil/plugin/loader.h"

namespace coil::plugin::detail {

// Serializes loads and registrations: the registries change only under it.
std::mutex& load_mutex();
// Runs `entry` with a fresh Registrar and commits it (register.cpp). Caller holds load_mutex.
LoadedPlugin run_entry(const std::string& name, coil_plugin_register_fn entry);
// Checks every name of `reg`, then adds them all. Caller holds load_mutex.
LoadedPlugin commit(const std::string& name, const Registrar& reg);

}  // namespace coil::plugin::detail
