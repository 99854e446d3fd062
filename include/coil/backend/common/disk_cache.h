// The on-disk kernel caches (host shared objects, cubins, launch configurations): a folder this
// user alone controls, and entries checked against a digest before anything uses them.
//
// Folder: created 0700 (whatever the umask). One not owned by the effective user, or writable
// by group or others, is refused with a warning, and a private temporary folder
// ($TMPDIR/coil-<pid>-XXXXXX, 0700, removed at exit) serves for the rest of the process. One
// that cannot be created or opened: a warning, and no disk cache (compiles still work). All
// later file operations go through the folder's descriptor (openat/renameat/unlinkat), so the
// folder checked is the folder used.
//
// Entry <name>: a regular file owned by the user, not writable by group or others, opened with
// O_NOFOLLOW; next to it <name>.sha256 holds the SHA-256 (hex) of the entry's key, a NUL and
// its content. Anything else (a symlink, a FIFO, a foreign file, a missing, short or wrong
// digest) is evicted (both files unlinked) and reported as a miss, so the caller recompiles.
//
// Publishing: the digest, then the entry, each written to <name>.tmp.<pid>.<n> in the folder,
// fsync'ed and renamed over; then the folder is fsync'ed. The digest goes first: a reader that
// finds the entry finds its digest, and a crash between the two leaves a digest without entry
// (a miss), never an entry without digest. Writers of one key race harmlessly (renames are
// atomic; a reader that sees one writer's digest with another's entry evicts and recompiles).
//
// Warnings are strings appended to the caller's vector (coil's C++ never prints), each at
// most once per process and folder.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coil::backend {

// True the first time `key` is seen in this process (thread-safe).
bool first_time_in_process(const std::string& key);

// An owned file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();

 private:
  int fd_ = -1;
};

struct CacheEntry {
  UniqueFd fd;          // the verified file, open read-only (dlopen it as /proc/self/fd/N)
  std::string content;  // its bytes, as verified
  std::string path;     // for messages
};

class DiskCache {
 public:
  // The folder <root>/<sub> (sub "" = root; sub may have several components). root "": no
  // disk cache, silently. Creates what is missing (0700). See above for refusals.
  DiskCache(const std::string& root, const std::string& sub, std::vector<std::string>* warnings);
  DiskCache(DiskCache&&) = default;
  DiskCache& operator=(DiskCache&&) = default;

  bool enabled() const { return dir_.get() >= 0; }
  const std::string& path() const { return path_; }  // the folder in use
  bool is_private() const { return private_; }       // the process's temporary folder

  // The verified entry, or nullopt (absent, or refused: then evicted).
  std::optional<CacheEntry> load(const std::string& name, const std::string& key);
  // Publishes `content` as entry `name` with mode `mode` (0600 data, 0700 shared objects).
  // False, with a warning, when it cannot (the caller goes on without the cache).
  bool store(const std::string& name, const std::string& key, std::string_view content,
             mode_t mode);
  // Unlinks the entry and its digest (a warning once per folder says why).
  void evict(const std::string& name, const std::string& why);

 private:
  bool write_atomic(const std::string& name, std::string_view content, mode_t mode);
  void warn(const std::string& kind, const std::string& message);

  UniqueFd dir_;
  std::string path_;
  bool private_ = false;
  std::vector<std::string>* warnings_ = nullptr;
};

// What <name>.sha256 holds (without the newline).
std::string entry_digest(std::string_view content, const std::string& key);

// A new folder $TMPDIR/coil-<pid>-XXXXXX, mode 0700 (CompileError when it cannot be made). The
// first call in a process also removes the user's coil-<pid>-* folders of dead processes.
std::string make_temp_dir();

// Removes $TMPDIR/coil-<pid>-* folders owned by this user whose process is gone; returns how
// many. make_temp_dir calls it once per process.
int remove_stale_temp_dirs();

}  // namespace coil::backend
