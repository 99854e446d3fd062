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

#include "coil/support/error.h"

#ifndef COIL_RUNTIME_HEADERS_DIR
#define COIL_RUNTIME_HEADERS_DIR ""
#endif

namespace coil::backend::cpu {

namespace fs = std::filesystem;

// ---- SHA-256 (FIPS 180-4), used for cache keys ------------------------------------------------
namespace detail {

class Sha256 {
 public:
  void update(std::string_view data) {
    for (unsigned char c : data) {
      buf_[buf_len_++] = c;
      if (buf_len_ == 64) {
        block(buf_.data());
        buf_len_ = 0;
      }
    }
    total_ += data.size();
  }

  std::string hex() {
    const uint64_t bits = total_ * 8;
    const unsigned char pad = 0x80;
    update(std::string_view(reinterpret_cast<const char*>(&pad), 1));
    const char zero = 0;
    while (buf_len_ != 56) update(std::string_view(&zero, 1));
    std::array<char, 8> len;
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(bits >> (56 - 8 * i));
    update(std::string_view(len.data(), 8));
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (uint32_t v : h_) {
      for (int i = 28; i >= 0; i -= 4) out += digits[(v >> i) & 0xf];
    }
    return out;
  }

 private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  void block(const unsigned char* p) {
    static constexpr uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (uint32_t(p[4 * i]) << 24) | (uint32_t(p[4 * i + 1]) << 16) |
             (uint32_t(p[4 * i + 2]) << 8) | uint32_t(p[4 * i + 3]);
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const uint32_t ch = (e & f) ^ (~e & g);
      const uint32_t t1 = h + s1 + ch + k[i] + w[i];
      const uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      const uint32_t t2 = s0 + maj;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  std::array<uint32_t, 8> h_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

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
