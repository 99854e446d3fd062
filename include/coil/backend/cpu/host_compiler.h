// Compiles generated C++ with the host compiler into a shared object and loads it.
//
// The object is cached on disk (options.cache_dir) under a hash of the source, the flags, the
// compiler's version and the runtime headers, so a warm start only dlopens. Compilation errors
// become CompileError carrying the compiler's log.
#pragma once

#include <memory>
#include <string>

#include "coil/support/options.h"

namespace coil::backend::cpu {

class SharedLibrary {
 public:
  explicit SharedLibrary(const std::string& path);  // dlopen; CompileError on failure
  ~SharedLibrary();
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  void* symbol(const std::string& name) const;  // CompileError if missing
  const std::string& path() const { return path_; }

 private:
  void* handle_ = nullptr;
  std::string path_;
};

struct HostCompileResult {
  std::shared_ptr<SharedLibrary> library;
  std::string command;  // the compiler command line
  std::string log;      // compiler output (warnings, vectorization report when asked)
  double seconds = 0;   // compile (or cache lookup) time
  bool cache_hit = false;
};

HostCompileResult compile_and_load(const std::string& source, const CompileOptions& options);

}  // namespace coil::backend::cpu
