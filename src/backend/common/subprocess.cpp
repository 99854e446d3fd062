// run_subprocess: fork a supervisor, which forks and execs the program (see subprocess.h).
#include "coil/backend/common/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "coil/support/error.h"

extern char** environ;

namespace coil::backend {

namespace {

// Between fork and exec only async-signal-safe calls: coil's process has threads (OpenMP, NVRTC
// jobs, Python's), and a lock one of them held at fork stays locked in the child forever.

// _Fork (glibc 2.34) skips the pthread_atfork handlers, which a forked child of a threaded
// process must not run (they take locks, allocate), and which the parent does not need.
pid_t fork_no_handlers() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  return _Fork();
#else
  return static_cast<pid_t>(syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0));
#endif
}

volatile sig_atomic_t g_program_group = 0;  // in the supervisor only

void supervisor_on_term(int) {
  const pid_t g = g_program_group;
  if (g > 0) kill(-g, SIGKILL);
}

void write_all(int fd, const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

// The program: its own process group, default signals, /dev/null, the pipe, no other fds.
[[noreturn]] void exec_program(const char* path, char* const* argv, const char* cwd, int devnull,
                               int out_fd, const char* exec_error, size_t exec_error_len) {
  setpgid(0, 0);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGPIPE, SIGCHLD})
    sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (dup2(devnull, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0) _exit(127);
#ifdef SYS_close_range
  syscall(SYS_close_range, 3u, ~0u, 0u);  // fds other threads opened without O_CLOEXEC
#endif
  if (cwd && chdir(cwd) != 0) _exit(127);
  execve(path, argv, environ);
  write_all(2, exec_error, exec_error_len);
  _exit(127);
}

[[noreturn]] void supervise(pid_t parent, const char* path, char* const* argv, const char* cwd,
                            int devnull, int out_fd, const char* exec_error,
                            size_t exec_error_len) {
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &all, nullptr);  // SIGTERM waits until the program's group is known
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = supervisor_on_term;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sa.sa_handler = SIG_IGN;  // a terminal's ^C reaches coil, which decides; never half of us
  for (int sig : {SIGINT, SIGQUIT, SIGHUP, SIGPIPE}) sigaction(sig, &sa, nullptr);
  sa.sa_handler = SIG_DFL;  // waitpid needs SIGCHLD not ignored
  sigaction(SIGCHLD, &sa, nullptr);
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(125);  // the parent died before prctl
  prctl(PR_SET_CHILD_SUBREAPER, 1);     // orphaned descendants come back to us to be reaped
  const pid_t child = fork_no_handlers();
  if (child == 0) exec_program(path, argv, cwd, devnull, out_fd, exec_error, exec_error_len);
  if (child < 0) _exit(126);
  setpgid(child, child);  // also here: no window where the group does not exist yet
  g_program_group = child;
  close(out_fd);
  close(devnull);
  sigprocmask(SIG_SETMASK, &none, nullptr);  // a pending SIGTERM is handled now
  int code = 126;
  for (;;) {
    int st = 0;
    const pid_t w = waitpid(-1, &st, 0);
    if (w == child) {
      code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      kill(-child, SIGKILL);  // whatever it left running in its group
    } else if (w < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: every descendant reaped
    }
  }
  _exit(code);
}

// argv[0] as execve wants it: a path, searched on $PATH when it has no '/'.
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (name[0] == '/') return name;
    char cwd[4096];  // the program may run in another folder
    return getcwd(cwd, sizeof(cwd)) ? std::string(cwd) + "/" + name : name;
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env && *path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  return "";
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (i < s.size()) {
    while (i < s.size() && space(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && !space(s[j])) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string quote_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty();
    for (char c : a)
      plain = plain && (std::isalnum(static_cast<unsigned char>(c)) ||
                        std::strchr("_./=:,+-", c) != nullptr);
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

SubprocessResult run_subprocess(const std::vector<std::string>& argv, double timeout_s,
                                const std::string& cwd) {
  SubprocessResult r;
  COIL_CHECK(!argv.empty()) << "run_subprocess without a program";
  const std::string path = resolve_program(argv[0]);
  if (path.empty()) {
    r.not_found = true;
    r.exit_code = 127;
    r.output = "'" + argv[0] + "': program not found on PATH\n";
    return r;
  }
  // Everything the children need is prepared here: they may not allocate.
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const std::string exec_error = "coil: cannot execute '" + path + "'\n";
  Fd devnull{open("/dev/null", O_RDONLY | O_CLOEXEC)};
  COIL_USER_CHECK(devnull.fd >= 0) << "cannot open /dev/null: " << std::strerror(errno);
  int p[2];
  COIL_USER_CHECK(pipe2(p, O_CLOEXEC) == 0) << "pipe2: " << std::strerror(errno);
  Fd rd{p[0]}, wr{p[1]};
  const pid_t parent = getpid();
  // Without the pthread_atfork handlers: the child only calls async-signal-safe functions
  // before exec, and handlers (OpenBLAS shuts its thread pool down in one) are costs or hazards.
  const pid_t sup = fork_no_handlers();
  if (sup == 0) {
    close(rd.fd);
    supervise(parent, path.c_str(), cargv.data(), cwd.empty() ? nullptr : cwd.c_str(), devnull.fd,
              wr.fd, exec_error.c_str(), exec_error.size());
  }
  COIL_USER_CHECK(sup > 0) << "cannot start '" << argv[0] << "': fork: " << std::strerror(errno);
  close(wr.fd);
  wr.fd = -1;

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const bool limited = timeout_s > 0;
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(limited ? timeout_s : 0));
  auto grace_end = Clock::time_point::max();  // after the kill: stop reading at some point
  char buf[65536];
  for (;;) {
    int wait_ms = -1;
    const auto now = Clock::now();
    if (limited && !r.timed_out && now >= deadline) {
      r.timed_out = true;
      kill(sup, SIGTERM);  // the supervisor kills the program's group and reaps it
      grace_end = now + std::chrono::seconds(5);
    }
    if (r.timed_out) {
      if (now >= grace_end) break;  // a descendant that escaped the group holds the pipe
      wait_ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(grace_end - now).count() + 1);
    } else if (limited) {
      wait_ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1);
    }
    struct pollfd pfd = {rd.fd, POLLIN, 0};
    const int n = poll(&pfd, 1, wait_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (n == 0) continue;  // the deadline is checked at the top
    const ssize_t got = read(rd.fd, buf, sizeof(buf));
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      break;
    }
    if (got == 0) break;  // every writer closed: the program and its descendants are done
    r.output.append(buf, static_cast<size_t>(got));
  }
  int st = 0;
  pid_t w;
  while ((w = waitpid(sup, &st, 0)) < 0 && errno == EINTR) {
  }
  if (w == sup) r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (r.exit_code == 127 && r.output.find("coil: cannot execute") != std::string::npos)
    r.not_found = true;
  return r;
}

}  // namespace coil::backend
