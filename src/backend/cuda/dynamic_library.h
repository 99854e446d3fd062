// A shared library opened by the first of several names that loads, and its entry points bound
// by name (private to backend/cuda: cuBLASLt and cuDNN are found this way, so building coil
// needs neither).
#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>

namespace coil::backend::cuda::detail {

struct DynamicLibrary {
  void* handle = nullptr;
  std::string name;  // the first of the names tried, for messages
  std::string why;   // the first failure ("" while everything was found)

  // Tries `names` in order (a soname a process has loaded already resolves to that copy).
  DynamicLibrary(std::initializer_list<const char*> names, const std::string& missing)
      : name(names.size() ? *names.begin() : "") {
    for (const char* n : names) {
      handle = dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (handle) return;
    }
    why = missing;
  }

  // Points `fn` at the entry point `name`; the first one missing is remembered in `why`.
  template <class Fn>
  void bind(Fn& fn, const char* symbol) {
    fn = handle ? reinterpret_cast<Fn>(dlsym(handle, symbol)) : nullptr;
    if (!fn && why.empty()) why = name + " has no " + symbol;
  }
};

}  // namespace coil::backend::cuda::detail
