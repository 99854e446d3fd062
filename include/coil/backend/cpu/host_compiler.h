// Compiles generated C++ with the host compiler into a shared object and loads it.
//
// The object is cached on disk (options.cache_dir) under a hash of the source, the flags, the
// compiler's version and the runtime headers (the key), so a warm start only dlopens. The disk
// cache's rules (trusted folder, digests, evictions) are in coil/backend/common/disk_cache.h; a
// cached object is dlopen'ed only after its digest is verified, from the verified descriptor.
//
// The compiler runs from an argument vector, never a shell (options.cxx and options.cxx_flags are
// split on whitespace), under options.compile_timeout_s (coil/backend/common/subprocess.h).
// Compilation errors become CompileError carrying the compiler's log.
//
// Entry symbols carry the key: the compiler gets -DCOIL_CACHE_KEY=k<key>, and a kernel defined
// as `COIL_KERNEL void COIL_ENTRY(kernel0)(...)` (kernel_prelude.h) is named kernel0_k<key>. So
// a library compiled from any other source (a swapped or stale cache entry) has none of the
// names asked for and cannot bind. compile_and_load resolves the `entries` it is given that way;
// a source that does not use COIL_ENTRY keeps its plain names (SharedLibrary::symbol).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "coil/support/options.h"

namespace coil::backend::cpu {

class SharedLibrary {
 public:
  // dlopen; CompileError on failure. path() is `shown_as` when given (the cache entry that holds
  // the same bytes as the private file loaded).
  explicit SharedLibrary(const std::string& path, const std::string& shown_as = "");
  // dlopen("/proc/self/fd/<fd>"): the very file that was verified. Keeps `fd` open while loaded
  // (so the name cannot come to mean another file); `path` is for messages.
  SharedLibrary(int fd, const std::string& path);
  ~SharedLibrary();
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  void* symbol(const std::string& name) const;  // exactly `name`; CompileError if missing
  const std::string& path() const { return path_; }

 private:
  void* handle_ = nullptr;
  int fd_ = -1;
  std::string path_;
};

struct HostCompileResult {
  std::shared_ptr<SharedLibrary> library;
  std::string command;  // the compiler command line
  std::string log;      // compiler output (warnings, vectorization report when asked)
  double seconds = 0;   // compile (or cache lookup) time
  bool cache_hit = false;
  std::string symbol_suffix;          // "_k<key>": COIL_ENTRY(name) is name + symbol_suffix
  std::vector<void*> entries;         // per requested entry, resolved with symbol_suffix
  std::vector<std::string> warnings;  // cache warnings (each once per process), to show the user

  // The address of COIL_ENTRY(name) (CompileError if missing).
  void* entry(const std::string& name) const { return library->symbol(name + symbol_suffix); }
};

// What coil adds to the user's flags. The CPU backend's kernels use OpenMP; a backend whose
// source needs none (the portable one: src/backend/portable) compiles without -fopenmp, so
// that a compiler without OpenMP builds it. Part of the cache key.
struct HostToolchain {
  bool openmp = true;
};

// Compiles (or finds in the cache) and loads `source`, then resolves each of `entries` as
// COIL_ENTRY names into result.entries. A cached library that fails to load or to resolve them
// is evicted and compiled again (once); after a fresh compile that is a CompileError.
HostCompileResult compile_and_load(const std::string& source, const CompileOptions& options,
                                   const std::vector<std::string>& entries = {},
                                   const HostToolchain& toolchain = {});

}  // namespace coil::backend::cpu
