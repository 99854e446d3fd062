// compile_and_load against a hostile or broken cache and compiler: planted, symlinked,
// truncated and swapped libraries, modes, unsafe and unwritable folders, hanging and failing
// compilers, shell metacharacters in the flags, concurrent compiles (threads and processes).
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "coil/backend/common/disk_cache.h"
#include "coil/backend/common/subprocess.h"
#include "coil/backend/cpu/host_compiler.h"
#include "coil/support/error.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using coil::CompileOptions;
using coil::backend::cpu::compile_and_load;
using coil::backend::cpu::HostCompileResult;

using coil::test_support::TempDir;

// y[i] = x[i] * <factor>, as coil emits kernels (COIL_ENTRY).
std::string scale_source(int factor) {
  return "#include \"coil/kernel_prelude.h\"\n"
         "COIL_KERNEL void COIL_ENTRY(kernel0)(void* const* bufs, const int64_t* sizes) {\n"
         "  const float* x = (const float*)bufs[0];\n"
         "  float* y = (float*)bufs[1];\n"
         "  for (int64_t i = 0; i < sizes[0]; ++i) y[i] = x[i] * " +
         std::to_string(factor) + ".0f;\n}\n";
}

// Runs kernel0 of `r` on {1, 2, 3}; returns y[2].
float run3(const HostCompileResult& r) {
  EXPECT_EQ(r.entries.size(), 1u);
  float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
  void* bufs[2] = {x, y};
  const int64_t sizes[1] = {3};
  reinterpret_cast<void (*)(void* const*, const int64_t*)>(r.entries.at(0))(bufs, sizes);
  return y[2];
}

std::string key_of(const HostCompileResult& r) { return r.symbol_suffix.substr(2); }

std::string joined(const std::vector<std::string>& w) {
  std::string s;
  for (const auto& x : w) s += x + "\n";
  return s;
}

bool contains(const std::vector<std::string>& w, const std::string& s) {
  return joined(w).find(s) != std::string::npos;
}

// A shared library built with g++ directly (never loaded here): its constructor creates
// `marker`, and it exports kernel0 under the name given, computing y = x * 1000.
fs::path build_planted(const fs::path& dir, const fs::path& marker, const std::string& symbol) {
  const fs::path src = dir / "planted.cpp", so = dir / "planted.so";
  std::ofstream(src) << "#include <fcntl.h>\n#include <unistd.h>\n#include <stdint.h>\n"
                        "__attribute__((constructor)) static void planted() {\n"
                        "  int fd = open(\""
                     << marker.string()
                     << "\", O_CREAT | O_WRONLY, 0600);\n  if (fd >= 0) close(fd);\n}\n"
                        "extern \"C\" void "
                     << symbol
                     << "(void* const* b, const int64_t* s) {\n"
                        "  for (int64_t i = 0; i < s[0]; ++i) ((float*)b[1])[i] = "
                        "((const float*)b[0])[i] * 1000;\n}\n";
  auto r = coil::backend::run_subprocess(
      {"g++", "-shared", "-fPIC", "-o", so.string(), src.string()}, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return so;
}

void copy_over(const fs::path& from, const fs::path& to) {
  fs::remove(to);
  fs::copy_file(from, to);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Cached {
  TempDir dir;
  CompileOptions opt;
  Cached() { opt.cache_dir = (dir.path / "cache").string(); }
  fs::path cache() const { return opt.cache_dir; }
};

TEST(HostCacheFaults, PlantedLibraryIsNeverLoaded) {
  Cached c;
  const std::string src = scale_source(2);
  auto first = compile_and_load(src, c.opt, {"kernel0"});
  EXPECT_EQ(run3(first), 6.0f);
  const std::string key = key_of(first);
  const fs::path entry = c.cache() / (key + ".so");
  const fs::path marker = c.dir.path / "constructor-ran";
  const fs::path planted = build_planted(c.dir.path, marker, "kernel0" + first.symbol_suffix);
  // Planted under the key: the old digest (or none at all) does not match it.
  copy_over(planted, entry);
  auto r = compile_and_load(src, c.opt, {"kernel0"});
  EXPECT_FALSE(r.cache_hit);
  EXPECT_EQ(run3(r), 6.0f);
  EXPECT_FALSE(fs::exists(marker)) << "the planted library's constructor ran";
  EXPECT_TRUE(contains(r.warnings, "evicted an invalid entry")) << joined(r.warnings);
  copy_over(planted, entry);
  fs::remove(entry.string() + ".sha256");
  auto r2 = compile_and_load(src, c.opt, {"kernel0"});
  EXPECT_FALSE(r2.cache_hit);
  EXPECT_EQ(run3(r2), 6.0f);
  EXPECT_FALSE(fs::exists(marker));
  // The recompiled entry is back and used.
  auto r3 = compile_and_load(src, c.opt, {"kernel0"});
  EXPECT_TRUE(r3.cache_hit);
  EXPECT_EQ(run3(r3), 6.0f);
  EXPECT_FALSE(fs::exists(marker));
}

TEST(HostCacheFaults, SymlinkEntryIsNotFollowed) {
  Cached c;
  const std::string src = scale_source(3);
  auto first = compile_and_load(src, c.opt, {"kernel0"});
  const fs::path entry = c.cache() / (key_of(first) + ".so");
  const fs::path marker = c.dir.path / "constructor-ran";
  const fs::path planted = build_planted(c.dir.path, marker, "kernel0" + first.symbol_suffix);
  fs::remove(entry);
  fs::create_symlink(planted, entry);
  // Even with a digest that matches what the link points to.
  std::ofstream(entry.string() + ".sha256")
      << coil::backend::entry_digest(slurp(planted), key_of(first)) << "\n";
  auto r = compile_and_load(src, c.opt, {"kernel0"});
  EXPECT_FALSE(r.cache_hit);
  EXPECT_EQ(run3(r), 9.0f);
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_FALSE(fs::is_symlink(entry));
  EXPECT_TRUE(fs::is_regular_file(entry));
  EXPECT_TRUE(fs::exists(planted));
}

TEST(HostCacheFaults, TruncatedEntriesAreRecompiled) {
  Cached c;
  const std::string src = scale_source(4);
  auto first = compile_and_load(src, c.opt, {"kernel0"});
  const fs::path entry = c.cache() / (key_of(first) + ".so");
  const auto full = fs::file_size(entry);
  for (uintmax_t size : {uintmax_t(0), uintmax_t(1), uintmax_t(4096), full / 2}) {
    fs::resize_file(entry, size);
    auto r = compile_and_load(src, c.opt, {"kernel0"});  // no SIGBUS: never dlopen'ed
    EXPECT_FALSE(r.cache_hit) << size;
    EXPECT_EQ(run3(r), 12.0f) << size;
    EXPECT_EQ(fs::file_size(entry), full) << size;
    EXPECT_TRUE(compile_and_load(src, c.opt, {"kernel0"}).cache_hit) << size;
  }
}

TEST(HostCacheFaults, SwappedEntryCannotBind) {
  Cached c;
  const std::string src = scale_source(5), other = scale_source(7);
  auto mine = compile_and_load(src, c.opt, {"kernel0"});
  auto theirs = compile_and_load(other, c.opt, {"kernel0"});
  const std::string key = key_of(mine);
  const fs::path entry = c.cache() / (key + ".so");
  const fs::path their_entry = c.cache() / (key_of(theirs) + ".so");
  // (a) Their library with its own valid digest, moved under my key: the digest binds their key.
  fs::copy_file(their_entry, entry, fs::copy_options::overwrite_existing);
  fs::copy_file(their_entry.string() + ".sha256", entry.string() + ".sha256",
                fs::copy_options::overwrite_existing);
  auto a = compile_and_load(src, c.opt, {"kernel0"});
  EXPECT_FALSE(a.cache_hit);
  EXPECT_EQ(run3(a), 15.0f);
  // (b) Their library with a digest made for my key (the digest passes): kernel0_k<their key>
  // is not kernel0_k<my key>, so binding fails; evicted and recompiled.
  fs::copy_file(their_entry, entry, fs::copy_options::overwrite_existing);
  std::ofstream(entry.string() + ".sha256")
      << coil::backend::entry_digest(slurp(their_entry), key) << "\n";
  auto b = compile_and_load(src, c.opt, {"kernel0"});
  EXPECT_FALSE(b.cache_hit);
  EXPECT_EQ(run3(b), 15.0f);
  auto again = compile_and_load(src, c.opt, {"kernel0"});
  EXPECT_TRUE(again.cache_hit);
  EXPECT_EQ(run3(again), 15.0f);
  // Their entry is untouched and still theirs.
  auto t = compile_and_load(other, c.opt, {"kernel0"});
  EXPECT_TRUE(t.cache_hit);
  EXPECT_EQ(run3(t), 21.0f);
}

TEST(HostCacheFaults, ModesUnderUmaskZero) {
  Cached c;
  const mode_t old = umask(0);
  auto r = compile_and_load(scale_source(6), c.opt, {"kernel0"});
  umask(old);
  auto mode = [](const fs::path& p) {
    struct stat st;
    EXPECT_EQ(stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  };
  const std::string key = key_of(r);
  EXPECT_EQ(mode(c.cache()), 0700u);
  EXPECT_EQ(mode(c.cache() / (key + ".so")), 0700u);
  EXPECT_EQ(mode(c.cache() / (key + ".so.sha256")), 0600u);
  EXPECT_EQ(mode(c.cache() / (key + ".cpp")), 0600u);
  EXPECT_EQ(mode(c.cache() / (key + ".cpp.sha256")), 0600u);
}

TEST(HostCacheFaults, UnsafeFolderUsesAPrivateCache) {
  Cached c;
  fs::create_directory(c.cache());
  chmod(c.cache().c_str(), 0777);
  const std::string src = scale_source(8);
  auto r = compile_and_load(src, c.opt, {"kernel0"});
  EXPECT_EQ(run3(r), 24.0f);
  ASSERT_EQ(r.warnings.size(), 1u) << joined(r.warnings);
  EXPECT_EQ(r.warnings[0].rfind("not using the kernel cache folder " + c.opt.cache_dir + ": " +
                                    c.opt.cache_dir +
                                    " is writable by group or others (mode 0777); using the "
                                    "private temporary cache ",
                                0),
            0u)
      << r.warnings[0];
  EXPECT_TRUE(fs::is_empty(c.cache()));  // nothing written to the unsafe folder
  auto again = compile_and_load(src, c.opt, {"kernel0"});
  EXPECT_TRUE(again.cache_hit);  // from the private cache
  EXPECT_TRUE(again.warnings.empty()) << joined(again.warnings);
  // A foreign owner (root can chown): refused the same way.
  Cached f;
  fs::create_directory(f.cache());
  if (chown(f.cache().c_str(), 4242, 4242) == 0) {
    auto o = compile_and_load(src, f.opt, {"kernel0"});
    EXPECT_EQ(run3(o), 24.0f);
    EXPECT_TRUE(contains(o.warnings, "owned by uid 4242")) << joined(o.warnings);
    EXPECT_TRUE(o.cache_hit);  // the process's private cache already has it
  }
}

TEST(HostCacheFaults, UnwritableFolderWarnsOnceAndCompiles) {
  TempDir d;
  std::ofstream(d.path / "file") << "x";
  CompileOptions opt;
  opt.cache_dir = (d.path / "file" / "cache").string();
  const std::string src = scale_source(9);
  auto r = compile_and_load(src, opt, {"kernel0"});
  EXPECT_EQ(run3(r), 27.0f);
  ASSERT_EQ(r.warnings.size(), 1u) << joined(r.warnings);
  EXPECT_EQ(r.warnings[0], "cannot use the kernel cache folder " + opt.cache_dir + " (" +
                               opt.cache_dir +
                               ": Not a directory); compiling without a disk cache");
  auto again = compile_and_load(src, opt, {"kernel0"});
  EXPECT_FALSE(again.cache_hit);
  EXPECT_EQ(run3(again), 27.0f);
  EXPECT_TRUE(again.warnings.empty()) << joined(again.warnings);
}

void write_script(const fs::path& p, const std::string& body) {
  std::ofstream(p) << "#!/bin/sh\n"
                      "if [ \"$1\" = --version ]; then echo 'fake-cxx 1.0'; exit 0; fi\n"
                   << body;
  chmod(p.c_str(), 0700);
}

bool alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

TEST(HostCacheFaults, HangingCompilerIsKilledWithItsGroup) {
  TempDir d;
  const fs::path pids = d.path / "pids";
  write_script(d.path / "hang.sh", "sleep 100 &\necho $$ $! > " + pids.string() + "\nwait\n");
  CompileOptions opt;
  opt.cxx = (d.path / "hang.sh").string();
  opt.compile_timeout_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    compile_and_load(scale_source(1), opt);
    FAIL() << "expected a CompileError";
  } catch (const coil::CompileError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("host compiler timed out after 1 s", 0), 0u) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  std::ifstream in(pids);
  pid_t script = 0, child = 0;
  ASSERT_TRUE(in >> script >> child);
  EXPECT_FALSE(alive(script));
  EXPECT_FALSE(alive(child));
  EXPECT_FALSE(kill(-script, 0) == 0 || errno != ESRCH) << "its process group is still there";
}

TEST(HostCacheFaults, FailingCompilerGivesItsLog) {
  TempDir d;
  write_script(d.path / "fail.sh", "echo 'fake-cxx: error: something broke' >&2\nexit 1\n");
  CompileOptions opt;
  opt.cxx = (d.path / "fail.sh").string();
  opt.cache_dir = (d.path / "cache").string();
  try {
    compile_and_load(scale_source(1), opt);
    FAIL() << "expected a CompileError";
  } catch (const coil::CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("host C++ compilation failed (exit 1)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fake-cxx: error: something broke"), std::string::npos) << msg;
  }
  // Nothing cached.
  for (auto& e : fs::directory_iterator(d.path / "cache")) ADD_FAILURE() << e.path();
}

TEST(HostCacheFaults, ShellMetacharactersInFlagsDoNothing) {
  TempDir d;
  const fs::path f = d.path / "FILE";
  const std::string touch = "touch " + f.string();
  for (const std::string& flags : {"-O1; " + touch, "$(" + touch + ")", "-O1 `" + touch + "`",
                                   "-O1 | " + touch, "-O1 && " + touch, "-O1\n" + touch}) {
    CompileOptions opt;
    opt.cxx_flags = flags;
    try {
      compile_and_load(scale_source(1), opt, {"kernel0"});
    } catch (const coil::CompileError&) {
      // g++ rejects the words; either way no shell ran them.
    }
    EXPECT_FALSE(fs::exists(f)) << flags;
  }
  // "ccache g++"-style compilers: the first word is the program, the rest its arguments.
  CompileOptions opt;
  opt.cxx = "env g++";
  EXPECT_EQ(run3(compile_and_load(scale_source(10), opt, {"kernel0"})), 30.0f);
}

void expect_one_valid_entry(const fs::path& cache, const std::string& key) {
  int files = 0;
  for (auto& e : fs::directory_iterator(cache)) {
    ++files;
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
  EXPECT_EQ(files, 4);  // <key>.so, <key>.cpp and their digests
  coil::backend::DiskCache dc(cache.string(), "", nullptr);
  EXPECT_TRUE(dc.load(key + ".so", key));
  EXPECT_TRUE(dc.load(key + ".cpp", key));
}

TEST(HostCacheFaults, ConcurrentCompilesFromThreads) {
  Cached c;
  const std::string src = scale_source(11);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  std::string key;
  std::mutex mu;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      auto r = compile_and_load(src, c.opt, {"kernel0"});
      if (run3(r) == 33.0f) ok++;
      std::lock_guard<std::mutex> lock(mu);
      key = key_of(r);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);
  expect_one_valid_entry(c.cache(), key);
}

TEST(HostCacheFaults, ConcurrentCompilesFromProcesses) {
  Cached c;
  const std::string src = scale_source(12);
  std::vector<pid_t> kids;
  for (int p = 0; p < 3; ++p) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 1;
      try {
        auto r = compile_and_load(src, c.opt, {"kernel0"});
        code = run3(r) == 36.0f ? 0 : 2;
      } catch (...) {
        code = 3;
      }
      _exit(code);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  }
  auto r = compile_and_load(src, c.opt, {"kernel0"});
  EXPECT_TRUE(r.cache_hit);
  EXPECT_EQ(run3(r), 36.0f);
  expect_one_valid_entry(c.cache(), key_of(r));
}

}  // namespace
