// Runs a program from an argument vector (never through a shell), capturing its output, with a
// time limit, without leaving processes behind.
//
//   parent (coil, maybe multi-threaded)
//     `- supervisor: a fork of coil; PR_SET_PDEATHSIG(SIGTERM), PR_SET_CHILD_SUBREAPER
//          `- the program (execve), leader of its own process group, and everything it starts
//
// The program gets stdin from /dev/null and stdout+stderr into one pipe read by the parent.
// On the time limit the parent sends SIGTERM to the supervisor; when the parent dies (even by
// SIGKILL) the kernel sends it SIGTERM. Either way the supervisor kills the program's whole
// process group with SIGKILL, reaps every descendant (it is their subreaper, so orphans such as
// cc1plus come back to it), then exits: when the call returns, nothing it started runs or
// lingers as a zombie. (A descendant that leaves the group with setsid() escapes the kill; the
// supervisor then waits for it.)
#pragma once

#include <string>
#include <vector>

namespace coil::backend {

struct SubprocessResult {
  int exit_code = -1;      // the program's exit status; 128 + N when killed by signal N
  bool timed_out = false;  // killed on the time limit
  bool not_found = false;  // argv[0] was not found or could not be executed
  std::string output;      // stdout and stderr, interleaved as written
};

// Runs argv[0] (searched on $PATH when it has no '/') with arguments argv[1..], in folder `cwd`
// ("" = this process's). timeout_s <= 0: no limit. Throws CompileError only when the process
// cannot be created at all.
SubprocessResult run_subprocess(const std::vector<std::string>& argv, double timeout_s,
                                const std::string& cwd = "");

// Splits on runs of whitespace (space, tab, newline); no quoting of any kind.
std::vector<std::string> split_words(const std::string& s);

// For messages: the words joined by spaces, each single-quoted where it holds anything but
// [A-Za-z0-9_./=:,+-] (so the line can be pasted into a shell).
std::string quote_command(const std::vector<std::string>& argv);

}  // namespace coil::backend
