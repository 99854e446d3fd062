// The trusted on-disk cache (see disk_cache.h).
#include "coil/backend/common/disk_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <sstream>

#include "coil/backend/common/sha256.h"
#include "coil/support/error.h"

namespace coil::backend {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int e) { return std::strerror(e); }

std::string octal_mode(mode_t m) {
  std::ostringstream s;
  s << "0" << std::oct << (m & 07777);
  return s.str();
}

// "" when a folder or entry of this fstat may be trusted, else why not.
std::string untrusted_reason(const struct stat& st) {
  if (st.st_uid != geteuid())
    return "owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
           std::to_string(geteuid()) + ")";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return "writable by group or others (mode " + octal_mode(st.st_mode) + ")";
  return "";
}

std::string tmp_dir_base() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// The pid in "<anything>.tmp.<pid>.<n>", or 0.
pid_t temp_file_pid(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos) return 0;
  size_t i = at + 5;
  pid_t pid = 0;
  size_t digits = 0;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i, ++digits)
    pid = pid * 10 + (name[i] - '0');
  return digits > 0 && digits < 10 && i < name.size() && name[i] == '.' ? pid : 0;
}

bool process_gone(pid_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

// Opens folder `name` under `at` (AT_FDCWD and a path for the root), creating it 0700 when
// missing. Returns the descriptor or -1 with errno.
int open_or_create_dir(int at, const std::string& name, bool follow) {
  const int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW);
  int fd = openat(at, name.c_str(), flags);
  if (fd >= 0 || errno != ENOENT) return fd;
  if (mkdirat(at, name.c_str(), 0700) != 0 && errno != EEXIST) return -1;
  fd = openat(at, name.c_str(), flags);
  if (fd < 0) return -1;
  struct stat st;
  // Ours and new (a concurrent creator's is as good): 0700 whatever the umask was.
  if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 07777) != 0700)
    fchmod(fd, 0700);
  return fd;
}

// The root path, creating its missing parents 0700 too.
int open_root(const std::string& root) {
  int fd = open_or_create_dir(AT_FDCWD, root, /*follow=*/true);
  if (fd >= 0 || errno != ENOENT) return fd;
  const fs::path parent = fs::path(root).lexically_normal().parent_path();
  if (parent.empty() || parent == fs::path(root).lexically_normal()) return -1;
  const int pfd = open_root(parent.string());
  if (pfd < 0) return -1;
  close(pfd);
  return open_or_create_dir(AT_FDCWD, root, true);
}

// Removes "*.tmp.<pid>.*" files of dead processes from the folder (once per process each).
void remove_stale_temp_files(int dir_fd) {
  const int dup_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return;
  DIR* d = fdopendir(dup_fd);
  if (!d) {
    close(dup_fd);
    return;
  }
  std::vector<std::string> stale;
  while (struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const pid_t pid = temp_file_pid(name);
    if (pid > 0 && pid != getpid() && process_gone(pid)) stale.push_back(name);
  }
  closedir(d);
  for (const std::string& n : stale) unlinkat(dir_fd, n.c_str(), 0);
}

struct PrivateRoot {
  std::mutex mu;
  std::string path;
  pid_t owner = 0;
  ~PrivateRoot() {
    if (path.empty() || owner != getpid()) return;  // a fork's exit leaves the parent's alone
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

PrivateRoot& private_root() {
  static PrivateRoot r;
  return r;
}

// The process's private cache root, made on first use.
std::string private_root_path() {
  PrivateRoot& r = private_root();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.path.empty() || r.owner != getpid()) {
    r.path = make_temp_dir();
    r.owner = getpid();
  }
  return r.path;
}

// Reads all of fd from offset 0; false on an error.
bool read_all(int fd, std::string& out) {
  out.clear();
  char buf[65536];
  off_t off = 0;
  for (;;) {
    const ssize_t n = pread(fd, buf, sizeof(buf), off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out.append(buf, static_cast<size_t>(n));
    off += n;
  }
}

std::atomic<uint64_t> g_temp_counter{0};

}  // namespace

bool first_time_in_process(const std::string& key) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  return seen.insert(key).second;
}

void UniqueFd::reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string entry_digest(std::string_view content, const std::string& key) {
  Sha256 h;
  h.update(key);
  h.update(std::string_view("\0", 1));
  h.update(content);
  return h.hex();
}

int remove_stale_temp_dirs() {
  const std::string base = tmp_dir_base();
  int removed = 0;
  DIR* d = opendir(base.c_str());
  if (!d) return 0;
  std::vector<std::string> stale;
  while (struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("coil-", 0) != 0) continue;
    size_t i = 5;
    pid_t pid = 0;
    for (; i < name.size() && i < 15 && std::isdigit(static_cast<unsigned char>(name[i])); ++i)
      pid = pid * 10 + (name[i] - '0');
    if (i == 5 || i >= name.size() || name[i] != '-' || pid == getpid()) continue;
    struct stat st;
    const std::string full = base + "/" + name;
    if (lstat(full.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    if (process_gone(pid)) stale.push_back(full);
  }
  closedir(d);
  for (const std::string& p : stale) {
    std::error_code ec;
    if (fs::remove_all(p, ec) > 0 && !ec) ++removed;
  }
  return removed;
}

std::string make_temp_dir() {
  static std::once_flag stale_once;
  std::call_once(stale_once, [] { remove_stale_temp_dirs(); });
  std::string templ = tmp_dir_base() + "/coil-" + std::to_string(getpid()) + "-XXXXXX";
  COIL_USER_CHECK(mkdtemp(templ.data()) != nullptr)
      << "cannot create a temporary directory " << templ << ": " << std::strerror(errno);
  chmod(templ.c_str(), 0700);  // mkdtemp makes 0700; say it anyway
  return templ;
}

DiskCache::DiskCache(const std::string& root, const std::string& sub,
                     std::vector<std::string>* warnings)
    : warnings_(warnings) {
  if (root.empty()) return;
  std::vector<std::string> parts;
  for (const auto& p : fs::path(sub)) {
    const std::string s = p.string();
    if (!s.empty() && s != "." && s != "/") parts.push_back(s);
  }
  // Opens root then each part, checking each; "" and the reason on refusal or failure.
  auto open_chain = [&](const std::string& r, std::string& refused, std::string& failed) {
    refused.clear();
    failed.clear();
    UniqueFd fd(open_root(r));
    std::string at = r;
    for (size_t i = 0;; ++i) {
      if (fd.get() < 0) {
        failed = at + ": " + errno_text(errno);
        return UniqueFd();
      }
      struct stat st;
      if (fstat(fd.get(), &st) != 0) {
        failed = at + ": " + errno_text(errno);
        return UniqueFd();
      }
      const std::string why = untrusted_reason(st);
      if (!why.empty()) {
        refused = at + " is " + why;
        return UniqueFd();
      }
      if (i == parts.size()) return fd;
      at += "/" + parts[i];
      fd = UniqueFd(open_or_create_dir(fd.get(), parts[i], /*follow=*/false));
    }
  };
  std::string refused, failed;
  std::string want = root;
  for (const std::string& p : parts) want += "/" + p;
  path_ = want;  // the warnings' once-per-folder key
  UniqueFd fd = open_chain(root, refused, failed);
  if (!refused.empty()) {
    std::string priv;
    try {
      priv = private_root_path();
    } catch (const CompileError& e) {
      warn("unwritable", "not using the kernel cache folder " + want + " (" + refused +
                             ") and cannot make a private one (" + e.what() +
                             "); compiling without a disk cache");
      path_.clear();
      return;
    }
    warn("refused", "not using the kernel cache folder " + want + ": " + refused +
                        "; using the private temporary cache " + priv + " for this process");
    std::string refused2, failed2;
    fd = open_chain(priv, refused2, failed2);
    if (fd.get() < 0) {
      path_.clear();
      return;
    }
    want = priv;
    for (const std::string& p : parts) want += "/" + p;
    private_ = true;
  } else if (fd.get() < 0) {
    warn("unwritable", "cannot use the kernel cache folder " + want + " (" + failed +
                           "); compiling without a disk cache");
    path_.clear();
    return;
  }
  dir_ = std::move(fd);
  path_ = want;
  if (first_time_in_process("stale-tmp:" + path_)) remove_stale_temp_files(dir_.get());
}

void DiskCache::warn(const std::string& kind, const std::string& message) {
  // Once per process per folder and kind (the folder asked for, whatever serves instead).
  if (!first_time_in_process(kind + ":" + path_)) return;
  if (warnings_) warnings_->push_back(message);
}

void DiskCache::evict(const std::string& name, const std::string& why) {
  if (!enabled()) return;
  // The entry first: at no time is there an entry without its digest.
  if (unlinkat(dir_.get(), name.c_str(), 0) != 0 && errno == EISDIR)
    unlinkat(dir_.get(), name.c_str(), AT_REMOVEDIR);
  unlinkat(dir_.get(), (name + ".sha256").c_str(), 0);
  warn("evicted", "evicted an invalid entry from the kernel cache folder " + path_ + " (" + name +
                      ": " + why + "); it is recompiled");
}

std::optional<CacheEntry> DiskCache::load(const std::string& name, const std::string& key) {
  if (!enabled()) return std::nullopt;
  // O_NONBLOCK: a FIFO planted under the name must not block the open.
  const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  // Opens and checks one file; "" or why it is refused.
  auto open_checked = [&](const std::string& n, UniqueFd& fd) -> std::string {
    fd = UniqueFd(openat(dir_.get(), n.c_str(), flags));
    if (fd.get() < 0) {
      if (errno == ENOENT) return "missing";
      if (errno == ELOOP) return "a symbolic link";
      return errno_text(errno);
    }
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return errno_text(errno);
    if (!S_ISREG(st.st_mode)) return "not a regular file";
    return untrusted_reason(st);
  };
  CacheEntry e;
  std::string why = open_checked(name, e.fd);
  if (why == "missing") return std::nullopt;
  if (!why.empty()) {
    evict(name, why);
    return std::nullopt;
  }
  UniqueFd dfd;
  why = open_checked(name + ".sha256", dfd);
  if (!why.empty()) {
    evict(name, "digest " + why);
    return std::nullopt;
  }
  std::string digest;
  if (!read_all(dfd.get(), digest) || !read_all(e.fd.get(), e.content)) {
    evict(name, "unreadable: " + errno_text(errno));
    return std::nullopt;
  }
  while (!digest.empty() && (digest.back() == '\n' || digest.back() == '\r')) digest.pop_back();
  if (digest.size() != 64) {
    evict(name, "digest of " + std::to_string(digest.size()) + " characters, not 64");
    return std::nullopt;
  }
  if (digest != entry_digest(e.content, key)) {
    evict(name, "digest mismatch (" + std::to_string(e.content.size()) + " bytes)");
    return std::nullopt;
  }
  // Back to blocking reads for whoever uses the descriptor.
  fcntl(e.fd.get(), F_SETFL, fcntl(e.fd.get(), F_GETFL) & ~O_NONBLOCK);
  e.path = path_ + "/" + name;
  return e;
}

bool DiskCache::write_atomic(const std::string& name, std::string_view content, mode_t mode) {
  const std::string tmp =
      name + ".tmp." + std::to_string(getpid()) + "." + std::to_string(g_temp_counter.fetch_add(1));
  UniqueFd fd(
      openat(dir_.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  std::string failed;
  if (fd.get() < 0) {
    failed = "create " + tmp + ": " + errno_text(errno);
  } else {
    const char* p = content.data();
    size_t left = content.size();
    while (left > 0 && failed.empty()) {
      const ssize_t w = write(fd.get(), p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) failed = "write " + tmp + ": " + errno_text(w < 0 ? errno : ENOSPC);
      if (w > 0) {
        p += w;
        left -= static_cast<size_t>(w);
      }
    }
    if (failed.empty() && fchmod(fd.get(), mode) != 0)
      failed = "chmod " + tmp + ": " + errno_text(errno);
    if (failed.empty() && fsync(fd.get()) != 0) failed = "fsync " + tmp + ": " + errno_text(errno);
    fd.reset();
    if (failed.empty() && renameat(dir_.get(), tmp.c_str(), dir_.get(), name.c_str()) != 0)
      failed = "rename " + tmp + ": " + errno_text(errno);
  }
  if (failed.empty()) return true;
  unlinkat(dir_.get(), tmp.c_str(), 0);
  warn("unwritable", "cannot write to the kernel cache folder " + path_ + " (" + failed +
                         "); compiling without caching there");
  return false;
}

bool DiskCache::store(const std::string& name, const std::string& key, std::string_view content,
                      mode_t mode) {
  if (!enabled()) return false;
  // The digest first (see disk_cache.h), then the entry, then the folder's own metadata.
  if (!write_atomic(name + ".sha256", entry_digest(content, key) + "\n", 0600)) return false;
  if (!write_atomic(name, content, mode)) {
    unlinkat(dir_.get(), (name + ".sha256").c_str(), 0);
    return false;
  }
  fsync(dir_.get());
  return true;
}

}  // namespace coil::backend
