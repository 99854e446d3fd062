// Host C++ compiler driver: source -> shared object (cached on disk) -> dlopen.
#include "coil/backend/cpu/host_compiler.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include "coil/backend/common/disk_cache.h"
#include "coil/backend/common/sha256.h"
#include "coil/backend/common/subprocess.h"
#include "coil/support/error.h"

#ifndef COIL_RUNTIME_HEADERS_DIR
#define COIL_RUNTIME_HEADERS_DIR ""
#endif

namespace coil::backend::cpu {

namespace fs = std::filesystem;

// ---- SHA-256 (FIPS 180-4), used for cache keys ------------------------------------------------
namespace detail {

using backend::Sha256;

// Exposed (not in the header) for the unit test.
std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex();
}

}  // namespace detail

namespace {

std::vector<std::string> compiler_words(const CompileOptions& options) {
  std::vector<std::string> w = split_words(options.cxx.empty() ? "g++" : options.cxx);
  COIL_USER_CHECK(!w.empty()) << "options.cxx names no host compiler";
  return w;
}

[[noreturn]] void throw_timeout(const CompileOptions& options, const std::vector<std::string>& argv,
                                const std::string& log) {
  // Not COIL_UNSUPPORTED: the message starts with these words (no source position before).
  throw CompileError("host compiler timed out after " + std::to_string(options.compile_timeout_s) +
                     " s (options.compile_timeout_s); its process group was killed\ncommand: " +
                     quote_command(argv) + "\n" + log);
}

// `<cxx> --version`, once per compiler per process.
std::string compiler_version(const CompileOptions& options) {
  std::vector<std::string> argv = compiler_words(options);
  const std::string cxx = quote_command(argv);
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(cxx);
    if (it != cache.end()) return it->second;
  }
  argv.push_back("--version");
  SubprocessResult r = run_subprocess(argv, static_cast<double>(options.compile_timeout_s));
  if (r.timed_out) throw_timeout(options, argv, r.output);
  COIL_USER_CHECK(r.exit_code == 0)
      << "host compiler '" << cxx << "' does not run (exit " << r.exit_code << "): " << r.output;
  std::lock_guard<std::mutex> lock(mu);
  cache[cxx] = r.output;
  return r.output;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Feeds the names and contents of every file under the runtime headers dir into `h`.
void hash_runtime_headers(const std::string& dir, detail::Sha256& h) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file()) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    const std::string rel = fs::relative(f, dir).generic_string();
    const std::string content = read_file(f);
    h.update(rel);
    h.update(std::string_view("\0", 1));
    h.update(std::to_string(content.size()));
    h.update(std::string_view("\0", 1));
    h.update(content);
  }
}

// Flags coil always adds before the user's: neither changes any result (coil kernels never read
// errno or FP exception flags), both let gcc vectorize sqrt and speculated selects.
constexpr const char* kFixedFlags = "-fno-math-errno -fno-trapping-math";
constexpr const char* kTailFlags = "-fopenmp -shared -fPIC -std=c++17";
constexpr const char* kTailFlagsNoOpenMP = "-shared -fPIC -std=c++17";

}  // namespace

// ---- SharedLibrary ----------------------------------------------------------------------------

SharedLibrary::SharedLibrary(const std::string& path, const std::string& shown_as)
    : path_(shown_as.empty() ? path : shown_as) {
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* err = dlerror();
    COIL_UNSUPPORTED() << "dlopen(" << path << ") failed: " << (err ? err : "unknown error");
  }
}

SharedLibrary::SharedLibrary(int fd, const std::string& path) : fd_(fd), path_(path) {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  handle_ = dlopen(proc.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* err = dlerror();
    close(fd_);
    COIL_UNSUPPORTED() << "dlopen(" << proc << ", the verified " << path
                       << ") failed: " << (err ? err : "unknown error");
  }
}

SharedLibrary::~SharedLibrary() {
  if (handle_) dlclose(handle_);
  if (fd_ >= 0) close(fd_);
}

void* SharedLibrary::symbol(const std::string& name) const {
  dlerror();
  void* sym = dlsym(handle_, name.c_str());
  if (!sym) {
    const char* err = dlerror();
    COIL_UNSUPPORTED() << "symbol '" << name << "' not found in " << path_ << ": "
                       << (err ? err : "null symbol");
  }
  return sym;
}

// ---- compile_and_load -------------------------------------------------------------------------

HostCompileResult compile_and_load(const std::string& source, const CompileOptions& options,
                                   const std::vector<std::string>& entries,
                                   const HostToolchain& toolchain) {
  const char* const tail_flags = toolchain.openmp ? kTailFlags : kTailFlagsNoOpenMP;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const std::string headers =
      options.runtime_headers_dir.empty() ? COIL_RUNTIME_HEADERS_DIR : options.runtime_headers_dir;
  COIL_USER_CHECK(!headers.empty() && fs::is_directory(headers))
      << "runtime headers directory '" << headers << "' not found";
  const std::vector<std::string> cxx = compiler_words(options);
  const std::vector<std::string> flags = split_words(options.cxx_flags);

  // Key: everything that can change the object, but not the paths (the cache is relocatable).
  // The -D/-frandom-seed words derived from the key are not part of it.
  detail::Sha256 h;
  h.update("coil-host-compile-v2");
  for (const std::string& part :
       {quote_command(cxx), std::string(kFixedFlags), quote_command(flags), std::string(tail_flags),
        compiler_version(options)}) {
    h.update(std::to_string(part.size()) + ":");
    h.update(part);
  }
  hash_runtime_headers(headers, h);
  h.update(std::to_string(source.size()) + ":");
  h.update(source);
  const std::string key = h.hex().substr(0, 40);

  HostCompileResult result;
  result.symbol_suffix = "_k" + key;
  // The compiler runs in its private folder on relative names: the object does not depend on
  // the folder's (random) name, so concurrent compiles of one source publish the same bytes.
  auto argv_for = [&](const std::string& src, const std::string& out) {
    std::vector<std::string> argv = cxx;
    for (const std::string& f : split_words(kFixedFlags)) argv.push_back(f);
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const std::string& f : split_words(tail_flags)) argv.push_back(f);
    argv.push_back("-I" + headers);
    argv.push_back("-DCOIL_CACHE_KEY=k" + key);
    argv.push_back("-frandom-seed=k" + key);
    argv.insert(argv.end(), {"-o", out, src});
    return argv;
  };
  auto resolve_entries = [&] {
    result.entries.clear();
    for (const std::string& e : entries) result.entries.push_back(result.entry(e));
  };

  std::optional<DiskCache> cache;
  if (!options.cache_dir.empty()) {
    cache.emplace(options.cache_dir, "", &result.warnings);
    if (!cache->enabled()) cache.reset();
  }
  const std::string so_name = key + ".so";
  if (cache) {
    // What the user can run again: the cache keeps the source next to the object.
    result.command =
        quote_command(argv_for(cache->path() + "/" + key + ".cpp", cache->path() + "/" + so_name));
    if (std::optional<CacheEntry> hit = cache->load(so_name, key)) {
      try {
        result.library = std::make_shared<SharedLibrary>(hit->fd.release(), hit->path);
        resolve_entries();
        result.cache_hit = true;
        result.seconds = elapsed();
        return result;
      } catch (const CompileError& e) {
        // Verified bytes that do not load or lack this key's entries (compiled from another
        // source): evict and compile once more; a failure then is a CompileError.
        result.library.reset();
        std::string why = e.what();
        why = why.substr(0, why.find('\n'));
        cache->evict(so_name, "verified but unusable: " + why);
      }
    }
  }

  const fs::path work = make_temp_dir();
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{work};
  {
    std::ofstream out(work / "kernel.cpp", std::ios::binary);
    out << source;
    COIL_USER_CHECK(out.good()) << "cannot write " << (work / "kernel.cpp").string();
  }
  const std::vector<std::string> argv = argv_for("kernel.cpp", "kernel.so");
  if (result.command.empty())
    result.command = quote_command(argv_for((work / "kernel.cpp").string(), "kernel.so"));
  SubprocessResult r =
      run_subprocess(argv, static_cast<double>(options.compile_timeout_s), work.string());
  result.log = std::move(r.output);
  if (r.timed_out) throw_timeout(options, argv, result.log);
  if (r.exit_code != 0) {
    COIL_UNSUPPORTED() << "host C++ compilation failed (exit " << r.exit_code
                       << ")\ncommand: " << quote_command(argv) << "\n(in " << work.string()
                       << ")\n"
                       << result.log;
  }
  const fs::path so = work / "kernel.so";
  std::string display = so.string();
  if (cache) {
    const std::string bytes = read_file(so);
    if (!bytes.empty() && cache->store(so_name, key, bytes, 0700)) {
      cache->store(key + ".cpp", key, source, 0600);
      display = cache->path() + "/" + so_name;
    }
  }
  // From the private folder (nobody else can write it); removed when we return, which an
  // open mapping survives.
  result.library = std::make_shared<SharedLibrary>(so.string(), display);
  resolve_entries();
  result.seconds = elapsed();
  return result;
}

}  // namespace coil::backend::cpu
