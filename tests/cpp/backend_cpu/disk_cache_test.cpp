// DiskCache: folder and file modes, refused and unwritable folders, entries refused, evicted,
// and stale temporaries of dead processes removed.
#include "coil/backend/common/disk_cache.h"
#include "temp_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace {

namespace fs = std::filesystem;
using coil::backend::DiskCache;
using coil::backend::entry_digest;

using coil::test_support::TempDir;

mode_t mode_of(const fs::path& p) {
  struct stat st;
  EXPECT_EQ(lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

bool contains(const std::vector<std::string>& w, const std::string& s) {
  for (const auto& x : w)
    if (x.find(s) != std::string::npos) return true;
  return false;
}

std::string joined(const std::vector<std::string>& w) {
  std::string s;
  for (const auto& x : w) s += x + "\n";
  return s;
}

void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

pid_t dead_pid() {
  const pid_t p = fork();
  if (p == 0) _exit(0);
  int st;
  waitpid(p, &st, 0);
  return p;
}

TEST(DiskCache, ModesWhateverTheUmask) {
  TempDir t;
  const mode_t old = umask(0);
  std::vector<std::string> w;
  DiskCache c((t.path / "a" / "b").string(), "cuda/launch", &w);
  ASSERT_TRUE(c.enabled()) << joined(w);
  EXPECT_TRUE(w.empty()) << joined(w);
  EXPECT_TRUE(c.store("x.txt", "k", "data", 0600));
  EXPECT_TRUE(c.store("x.so", "k", "elf", 0700));
  umask(old);
  for (const char* d : {"a", "a/b", "a/b/cuda", "a/b/cuda/launch"})
    EXPECT_EQ(mode_of(t.path / d), 0700u) << d;
  const fs::path dir = t.path / "a/b/cuda/launch";
  EXPECT_EQ(mode_of(dir / "x.txt"), 0600u);
  EXPECT_EQ(mode_of(dir / "x.txt.sha256"), 0600u);
  EXPECT_EQ(mode_of(dir / "x.so"), 0700u);
  EXPECT_EQ(mode_of(dir / "x.so.sha256"), 0600u);
  int files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 4);  // no temporaries left
  auto e = c.load("x.txt", "k");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->content, "data");
  EXPECT_FALSE(c.load("x.txt", "another key"));  // the digest binds the key: evicted
  EXPECT_FALSE(fs::exists(dir / "x.txt"));
  EXPECT_FALSE(fs::exists(dir / "x.txt.sha256"));
}

void expect_refused_with_private_cache(const fs::path& root, const std::string& reason) {
  std::vector<std::string> w;
  DiskCache c(root.string(), "cuda", &w);
  ASSERT_TRUE(c.enabled());
  EXPECT_TRUE(c.is_private());
  ASSERT_EQ(w.size(), 1u) << joined(w);
  EXPECT_NE(w[0].find("not using the kernel cache folder " + root.string() + "/cuda: "),
            std::string::npos)
      << w[0];
  EXPECT_NE(w[0].find(reason), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("using the private temporary cache"), std::string::npos) << w[0];
  const std::string tmp = fs::temp_directory_path().string() + "/coil-" + std::to_string(getpid());
  EXPECT_EQ(c.path().rfind(tmp, 0), 0u) << c.path();
  EXPECT_EQ(mode_of(c.path()), 0700u);
  EXPECT_TRUE(c.store("e", "k", "v", 0600));
  EXPECT_TRUE(c.load("e", "k"));
  EXPECT_FALSE(fs::exists(root / "cuda" / "e"));
  // Once per process per folder.
  std::vector<std::string> w2;
  DiskCache c2(root.string(), "cuda", &w2);
  EXPECT_TRUE(w2.empty()) << joined(w2);
  EXPECT_TRUE(c2.load("e", "k"));  // the same private cache
}

TEST(DiskCache, GroupOrWorldWritableFolderRefused) {
  TempDir t;
  fs::create_directory(t.path / "shared");
  chmod((t.path / "shared").c_str(), 0777);
  expect_refused_with_private_cache(t.path / "shared", "writable by group or others (mode 0777)");
  fs::create_directory(t.path / "group");
  chmod((t.path / "group").c_str(), 0770);
  expect_refused_with_private_cache(t.path / "group", "writable by group or others (mode 0770)");
}

TEST(DiskCache, ForeignOwnedFolderRefused) {
  TempDir t;
  fs::create_directory(t.path / "theirs");
  if (chown((t.path / "theirs").c_str(), 12345, 12345) != 0) GTEST_SKIP() << "needs root";
  expect_refused_with_private_cache(t.path / "theirs", "owned by uid 12345");
}

TEST(DiskCache, ForeignOwnedSubfolderRefused) {
  TempDir t;
  fs::create_directories(t.path / "mine" / "cuda");
  if (chown((t.path / "mine" / "cuda").c_str(), 12345, 12345) != 0) GTEST_SKIP() << "needs root";
  std::vector<std::string> w;
  DiskCache c((t.path / "mine").string(), "cuda", &w);
  EXPECT_TRUE(c.is_private());
  EXPECT_TRUE(contains(w, "owned by uid 12345")) << joined(w);
}

TEST(DiskCache, UnwritableFolderWarnsOnceAndDisables) {
  TempDir t;
  write(t.path / "file", "x");  // a regular file where a folder would have to be
  const fs::path root = t.path / "file" / "cache";
  std::vector<std::string> w;
  DiskCache c(root.string(), "", &w);
  EXPECT_FALSE(c.enabled());
  ASSERT_EQ(w.size(), 1u) << joined(w);
  EXPECT_EQ(w[0].rfind("cannot use the kernel cache folder " + root.string() + " (", 0), 0u)
      << w[0];
  EXPECT_NE(w[0].find("compiling without a disk cache"), std::string::npos) << w[0];
  EXPECT_FALSE(c.load("e", "k"));
  EXPECT_FALSE(c.store("e", "k", "v", 0600));
  std::vector<std::string> w2;
  DiskCache c2(root.string(), "", &w2);
  EXPECT_TRUE(w2.empty()) << joined(w2);
}

TEST(DiskCache, SymlinkEntryNotFollowed) {
  TempDir t;
  std::vector<std::string> w;
  DiskCache c((t.path / "c").string(), "", &w);
  write(t.path / "target", "v");
  write(t.path / "c" / "e.sha256", entry_digest("v", "k") + "\n");
  fs::create_symlink(t.path / "target", t.path / "c" / "e");
  EXPECT_FALSE(c.load("e", "k"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(t.path / "c" / "e")));  // the link evicted
  EXPECT_TRUE(fs::exists(t.path / "target"));                        // not what it points to
  EXPECT_TRUE(contains(w, "a symbolic link")) << joined(w);
  // A symlinked digest is refused too.
  ASSERT_TRUE(c.store("f", "k", "v", 0600));
  fs::remove(t.path / "c" / "f.sha256");
  write(t.path / "digest", entry_digest("v", "k"));
  fs::create_symlink(t.path / "digest", t.path / "c" / "f.sha256");
  EXPECT_FALSE(c.load("f", "k"));
  EXPECT_FALSE(fs::exists(t.path / "c" / "f"));
}

TEST(DiskCache, TruncatedEntriesAndBadDigestsEvicted) {
  TempDir t;
  std::vector<std::string> w;
  DiskCache c((t.path / "c").string(), "", &w);
  std::string content(10000, 'x');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7);
  const fs::path e = t.path / "c" / "e";
  for (size_t size : {size_t(0), size_t(1), size_t(4096), content.size() / 2}) {
    ASSERT_TRUE(c.store("e", "k", content, 0600));
    ASSERT_TRUE(c.load("e", "k"));
    fs::resize_file(e, size);
    EXPECT_FALSE(c.load("e", "k")) << size;
    EXPECT_FALSE(fs::exists(e)) << size;
    EXPECT_FALSE(fs::exists(e.string() + ".sha256")) << size;
  }
  // A digest missing, short, or of another content.
  for (const std::string& digest : {std::string("-"), std::string(""), std::string("abc\n"),
                                    entry_digest("other", "k") + "\n"}) {
    ASSERT_TRUE(c.store("e", "k", content, 0600));
    if (digest == "-")
      fs::remove(e.string() + ".sha256");
    else
      write(e.string() + ".sha256", digest);
    EXPECT_FALSE(c.load("e", "k")) << digest;
    EXPECT_FALSE(fs::exists(e)) << digest;
  }
  EXPECT_TRUE(contains(w, "evicted an invalid entry from the kernel cache folder")) << joined(w);
  EXPECT_EQ(w.size(), 1u) << "once per folder: " << joined(w);
}

TEST(DiskCache, ForeignOrWritableEntriesAndFifosRefused) {
  TempDir t;
  DiskCache c((t.path / "c").string(), "", nullptr);
  const fs::path e = t.path / "c" / "e";
  ASSERT_TRUE(c.store("e", "k", "v", 0600));
  chmod(e.c_str(), 0666);
  EXPECT_FALSE(c.load("e", "k"));
  EXPECT_FALSE(fs::exists(e));
  ASSERT_TRUE(c.store("e", "k", "v", 0600));
  if (chown(e.c_str(), 12345, 12345) == 0) {
    EXPECT_FALSE(c.load("e", "k"));
    EXPECT_FALSE(fs::exists(e));
  }
  write(e.string() + ".sha256", entry_digest("", "k"));
  ASSERT_EQ(mkfifo(e.c_str(), 0600), 0);
  EXPECT_FALSE(c.load("e", "k"));  // does not block on the FIFO
  EXPECT_FALSE(fs::exists(fs::symlink_status(e)));
}

TEST(DiskCache, StaleTemporariesOfDeadProcessesRemoved) {
  TempDir t;
  const pid_t dead = dead_pid();
  const fs::path root = t.path / "c";
  fs::create_directory(root);
  chmod(root.c_str(), 0700);
  write(root / ("e.tmp." + std::to_string(dead) + ".0"), "partial");
  write(root / ("e.tmp." + std::to_string(getppid()) + ".0"), "a live writer's");
  DiskCache c(root.string(), "", nullptr);
  EXPECT_FALSE(fs::exists(root / ("e.tmp." + std::to_string(dead) + ".0")));
  EXPECT_TRUE(fs::exists(root / ("e.tmp." + std::to_string(getppid()) + ".0")));

  // Temporary folders $TMPDIR/coil-<pid>-*: a dead pid's removed, a live one's kept.
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  setenv("TMPDIR", t.path.c_str(), 1);
  const fs::path stale = t.path / ("coil-" + std::to_string(dead) + "-AbC123");
  const fs::path live = t.path / ("coil-" + std::to_string(getppid()) + "-AbC123");
  const fs::path other = t.path / "coil-notapid-AbC123";
  fs::create_directories(stale / "sub");
  write(stale / "sub" / "kernel.so", "x");
  fs::create_directories(live);
  fs::create_directories(other);
  EXPECT_EQ(coil::backend::remove_stale_temp_dirs(), 1);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  const std::string made = coil::backend::make_temp_dir();
  EXPECT_EQ(made.rfind(t.path.string() + "/coil-" + std::to_string(getpid()) + "-", 0), 0u) << made;
  EXPECT_EQ(mode_of(made), 0700u);
  if (old)
    setenv("TMPDIR", saved.c_str(), 1);
  else
    unsetenv("TMPDIR");
}

TEST(DiskCache, ConcurrentWritersLeaveOneValidEntry) {
  TempDir t;
  const std::string root = (t.path / "c").string();
  const std::string content(100000, 'z');
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      DiskCache c(root, "", nullptr);
      for (int j = 0; j < 20; ++j) {
        if (!c.load("e", "k")) c.store("e", "k", content, 0600);
      }
    });
  for (auto& th : threads) th.join();
  DiskCache c(root, "", nullptr);
  auto e = c.load("e", "k");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->content, content);
  int files = 0;
  for (auto& x : fs::directory_iterator(root)) files += 1 + 0 * x.is_regular_file();
  EXPECT_EQ(files, 2);
}

}  // namespace
