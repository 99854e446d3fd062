// The backends compile_graph chooses from (coil/backend/api/registry.h): the built-in ones,
// then those registered at run time (a plugin's, coil/plugin/plugin.h: Registrar::add_backend).
#pragma once

#include <memory>
#include <vector>

#include "coil/backend/api/registry.h"

namespace coil::runtime {

// The current table: the built-in backends, in the order select() prefers them per device
// (cpu, cuda, portable; src/runtime/backends.cpp registers each in one line), then the
// registered ones in registration order (a device's default stays the built-in one). Takes no
// lock; the reference, and every Backend reached through it, stays valid for the process.
const backend::BackendRegistry& backends();

// Adds `added` to the process-wide table, all or nothing: CompileError naming the backend when
// one is null, its name is empty or has blanks or commas, is taken (a built-in's or an earlier
// registration's) or repeats within `added`. Thread-safe: writers are serialized, and a new
// table is published instead of changing the one readers hold (as ops::register_ops does).
// For the plugin loader (src/plugin/register_backend.cpp) and programs that link coil.
void register_backends(std::vector<std::shared_ptr<const backend::Backend>> added);

}  // namespace coil::runtime
