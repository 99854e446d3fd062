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
#include <sstream>
#include <string_view>
#include <vector>

#include "coil/backend/common/sha256.h"
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

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

struct CommandResult {
  int status = -1;
  std::string output;
};

// Runs `command` through /bin/sh with stderr merged into stdout.
CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  COIL_USER_CHECK(pipe != nullptr) << "cannot run the host compiler: " << std::strerror(errno);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int st = pclose(pipe);
  r.status = (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
  return r;
}

// `<cxx> --version`, once per compiler per process.
std::string compiler_version(const std::string& cxx) {
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(cxx);
    if (it != cache.end()) return it->second;
  }
  CommandResult r = run_command(cxx + " --version");
  COIL_USER_CHECK(r.status == 0) << "host compiler '" << cxx << "' does not run (exit " << r.status
                                 << "): " << r.output;
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

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::to_string(getpid()) + "." + std::to_string(counter++) + "." +
         std::to_string(static_cast<uint64_t>(now) & 0xffffff);
}

fs::path make_private_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/coil-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  COIL_USER_CHECK(mkdtemp(buf.data()) != nullptr)
      << "cannot create a temporary directory " << templ << ": " << std::strerror(errno);
  return fs::path(buf.data());
}

void write_file_atomic(const fs::path& path, const std::string& content) {
  const fs::path tmp = path.string() + ".tmp." + unique_suffix();
  {
    std::ofstream out(tmp, std::ios::binary);
    COIL_USER_CHECK(out.good()) << "cannot write " << tmp.string();
    out << content;
    COIL_USER_CHECK(out.good()) << "cannot write " << tmp.string();
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

// Flags coil always adds before the user's: neither changes any result (coil kernels never read
// errno or FP exception flags), both let gcc vectorize sqrt and speculated selects.
constexpr const char* kFixedFlags = "-fno-math-errno -fno-trapping-math";
constexpr const char* kTailFlags = "-fopenmp -shared -fPIC -std=c++17";

}  // namespace

// ---- SharedLibrary ----------------------------------------------------------------------------

SharedLibrary::SharedLibrary(const std::string& path) : path_(path) {
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* err = dlerror();
    COIL_UNSUPPORTED() << "dlopen(" << path << ") failed: " << (err ? err : "unknown error");
  }
}

SharedLibrary::~SharedLibrary() {
  if (handle_) dlclose(handle_);
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

HostCompileResult compile_and_load(const std::string& source, const CompileOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const std::string headers =
      options.runtime_headers_dir.empty() ? COIL_RUNTIME_HEADERS_DIR : options.runtime_headers_dir;
  COIL_USER_CHECK(!headers.empty() && fs::is_directory(headers))
      << "runtime headers directory '" << headers << "' not found";
  const std::string cxx = options.cxx.empty() ? std::string("g++") : options.cxx;
  auto command_for = [&](const std::string& src, const std::string& out) {
    return cxx + " " + kFixedFlags + " " + options.cxx_flags + " " + kTailFlags + " -I" +
           shell_quote(headers) + " -o " + shell_quote(out) + " " + shell_quote(src);
  };

  HostCompileResult result;
  fs::path cache_so;
  if (!options.cache_dir.empty()) {
    // Key: everything that can change the object, but not the paths (the cache is relocatable).
    detail::Sha256 h;
    h.update("coil-host-compile-v1");
    for (const std::string& part : {cxx, std::string(kFixedFlags), options.cxx_flags,
                                    std::string(kTailFlags), compiler_version(cxx)}) {
      h.update(std::to_string(part.size()) + ":");
      h.update(part);
    }
    hash_runtime_headers(headers, h);
    h.update(std::to_string(source.size()) + ":");
    h.update(source);
    const std::string key = h.hex().substr(0, 40);
    std::error_code ec;
    fs::create_directories(options.cache_dir, ec);
    cache_so = fs::path(options.cache_dir) / (key + ".so");
    result.command =
        command_for((fs::path(options.cache_dir) / (key + ".cpp")).string(), cache_so.string());
    if (fs::exists(cache_so, ec)) {
      try {
        result.library = std::make_shared<SharedLibrary>(cache_so.string());
        result.cache_hit = true;
        result.seconds = elapsed();
        return result;
      } catch (const CompileError&) {
        // A corrupt entry (should not happen thanks to rename): recompile over it.
      }
    }
  }

  const fs::path work = make_private_dir();
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{work};
  const fs::path src = work / "kernel.cpp";
  {
    std::ofstream out(src, std::ios::binary);
    out << source;
    COIL_USER_CHECK(out.good()) << "cannot write " << src.string();
  }
  const fs::path out =
      cache_so.empty() ? work / "kernel.so" : work / ("kernel." + unique_suffix() + ".so");
  const std::string command = command_for(src.string(), out.string());
  if (result.command.empty()) result.command = command;
  CommandResult r = run_command(command);
  result.log = std::move(r.output);
  if (r.status != 0) {
    COIL_UNSUPPORTED() << "host C++ compilation failed (exit " << r.status
                       << ")\ncommand: " << command << "\n"
                       << result.log;
  }

  if (cache_so.empty()) {
    result.library = std::make_shared<SharedLibrary>(out.string());
  } else {
    // Publish atomically: readers either see no file or a complete one.
    const fs::path tmp = cache_so.string() + ".tmp." + unique_suffix();
    std::error_code ec;
    fs::copy_file(out, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(tmp, cache_so, ec);
    if (ec) {
      fs::remove(tmp, ec);
      result.library = std::make_shared<SharedLibrary>(out.string());  // cache not writable
    } else {
      write_file_atomic(cache_so.parent_path() / (cache_so.stem().string() + ".cpp"), source);
      result.library = std::make_shared<SharedLibrary>(cache_so.string());
    }
  }
  result.seconds = elapsed();
  return result;
}

}  // namespace coil::backend::cpu
