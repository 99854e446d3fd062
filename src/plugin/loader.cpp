// Loading a plugin library: dlopen, the ABI check, then the entry point (register.cpp).
#include "coil/plugin/loader.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "plugin_internal.h"

namespace coil::plugin {

namespace {

std::vector<LoadedPlugin>& loaded() {
  static std::vector<LoadedPlugin> plugins;
  return plugins;
}

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// A plugin calls coil's functions (meta helpers, LoweringContext, BodyBuilder) without linking
// coil: its undefined symbols must resolve against the library coil lives in. Python loads
// extension modules RTLD_LOCAL, which hides them; reopening our own library with
// RTLD_NOLOAD | RTLD_GLOBAL makes its symbols visible to libraries loaded afterwards. (In a
// program that links coil statically there is no library to promote; it must export its
// symbols, -rdynamic, to load plugins.)
void make_coil_symbols_global() {
  static std::once_flag once;
  std::call_once(once, [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&make_coil_symbols_global), &info) == 0 ||
        info.dli_fname == nullptr)
      return;
    if (void* self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL)) {
      // The handle only raised the flags of an already loaded library; the extra reference
      // keeps it loaded, which it is for the whole process anyway.
      (void)self;
    } else {
      dlerror();  // the main program: nothing to promote
    }
  });
}

}  // namespace

void check_abi(const AbiInfo& info, const std::string& where) {
  if (info.api_version != COIL_PLUGIN_API_VERSION)
    throw PluginError(where + " was built for coil plugin API version " +
                      std::to_string(info.api_version) + ", this coil has version " +
                      std::to_string(COIL_PLUGIN_API_VERSION) + ": rebuild it against this coil");
  const std::string version = info.coil_version ? info.coil_version : "?";
  if (info.struct_size != sizeof(AbiInfo) || info.fingerprint != abi_fingerprint())
    throw PluginError(where + " was built against another coil (coil " + version +
                      ", ABI fingerprint " + std::to_string(info.fingerprint) + "; this is coil " +
                      COIL_VERSION_STRING + ", fingerprint " + std::to_string(abi_fingerprint()) +
                      "): rebuild it against this coil's headers");
}

LoadedPlugin load_plugin(const std::string& path) {
  std::lock_guard<std::mutex> lock(detail::load_mutex());
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(path, ec);
  if (ec) throw PluginError("coil plugin " + path + ": no such file");
  const std::string where = "coil plugin " + canonical.string();
  for (const LoadedPlugin& p : loaded()) {
    if (p.path == canonical.string()) return p;  // loaded before: a no-op
  }

  make_coil_symbols_global();
  // RTLD_NOW: a symbol the plugin needs and this coil lacks (built against another version)
  // fails here, with its name, rather than as a crash at its first call.
  void* handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr)
    throw PluginError(where + ": cannot load it: " + dl_error() +
                      " (a library built against another coil, or not a shared library)");
  auto fail = [&](const std::string& msg) -> PluginError {
    dlclose(handle);  // nothing of it is registered yet, so nothing points into it
    return PluginError(msg);
  };

  auto abi = reinterpret_cast<coil_plugin_abi_fn>(dlsym(handle, "coil_plugin_abi"));
  if (abi == nullptr)
    throw fail(where + " is not a coil plugin: it has no coil_plugin_abi symbol " +
               "(a plugin declares COIL_PLUGIN_ABI(\"name\"); coil/plugin/plugin.h)");
  const AbiInfo* info = abi();
  if (info == nullptr) throw fail(where + ": coil_plugin_abi() returned null");
  try {
    check_abi(*info, where);
  } catch (const PluginError& e) {
    throw fail(e.what());
  }
  auto entry = reinterpret_cast<coil_plugin_register_fn>(dlsym(handle, "coil_plugin_register"));
  if (entry == nullptr)
    throw fail(where + ": no coil_plugin_register symbol (define extern \"C\" " +
               "COIL_PLUGIN_EXPORT void coil_plugin_register(coil::plugin::Registrar&))");

  const std::string name = info->plugin_name ? info->plugin_name : canonical.filename().string();
  LoadedPlugin record;
  try {
    record = detail::run_entry(name, entry);
  } catch (const PluginError& e) {
    throw fail(std::string(e.what()) + " (" + canonical.string() + ")");
  }
  // Loaded for good: the registries now hold its functions, so the handle is never closed.
  record.path = canonical.string();
  loaded().push_back(record);
  return record;
}

std::vector<LoadedPlugin> loaded_plugins() {
  std::lock_guard<std::mutex> lock(detail::load_mutex());
  return loaded();
}

}  // namespace coil::plugin
